package main

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/control"
	"github.com/seed04fbb902/weir/engine/cluster/exchange"
)

// demoNodes is the demo engine's node count (the engine's default, made explicit for
// the exchange mesh, which serves each node).
const demoNodes = 2

// openDemoExchange sets opts up for the demo's --exchange: nothing for channel, a
// mesh of Flight servers (the caller closes it after the engine) for flight.
func openDemoExchange(kind string, opts *engine.Options) (*exchange.Mesh, error) {
	switch kind {
	case "channel":
		return nil, nil
	case "flight":
		opts.Nodes = demoNodes
		m, err := exchange.NewMesh(demoNodes, 0, memory.NewGoAllocator())
		if err != nil {
			return nil, fmt.Errorf("demo: %w", err)
		}
		opts.Exchange = m
		return m, nil
	}
	return nil, fmt.Errorf("demo: --exchange %q, want channel or flight", kind)
}

// openDemoControl sets opts up for --control: nothing for channel, control streams
// on loopback (the caller closes them after the engine) for grpc.
func openDemoControl(kind string, opts *engine.Options) (*control.Local, error) {
	switch kind {
	case "channel":
		return nil, nil
	case "grpc":
		l, err := control.NewLocal()
		if err != nil {
			return nil, err
		}
		opts.Control = l
		return l, nil
	}
	return nil, fmt.Errorf("--control %q, want channel or grpc", kind)
}
