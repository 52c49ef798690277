package main

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/engine"
	"github.com/seed04fbb902/weir/engine/cluster/control"
	"github.com/seed04fbb902/weir/engine/cluster/exchange"
)

// meshNodes is the node count of an engine whose edges are on an exchange mesh (the
// engine's default, made explicit for the mesh, which serves each node).
const meshNodes = 2

// openExchange sets opts up for --exchange (weir demo and weir serve): nothing for
// channel, a mesh of Flight servers (the caller closes it after the engine) for
// flight.
func openExchange(kind string, opts *engine.Options) (*exchange.Mesh, error) {
	switch kind {
	case "channel":
		return nil, nil
	case "flight":
		opts.Nodes = meshNodes
		m, err := exchange.NewMesh(meshNodes, 0, memory.NewGoAllocator())
		if err != nil {
			return nil, err
		}
		opts.Exchange = m
		return m, nil
	}
	return nil, fmt.Errorf("--exchange %q, want channel or flight", kind)
}

// openControl sets opts up for --control (weir demo and weir serve): nothing for
// channel, control streams on loopback (the caller closes them after the engine) for
// grpc.
func openControl(kind string, opts *engine.Options) (*control.Local, error) {
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
