package exchange

import (
	"fmt"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/seed04fbb902/weir/executors"
)

// Edge names one exchange stream: the upstream actor that sends, the downstream actor
// that receives, and the generation of the graph they belong to (a rebuilt graph, after
// a recovery or a rescale, has a new generation, so that a stream of the old graph
// never feeds the new one).
type Edge struct {
	Up, Down   executors.ActorID
	Generation uint64
}

func (e Edge) String() string {
	return fmt.Sprintf("edge %d -> %d (generation %d)", e.Up, e.Down, e.Generation)
}

// descriptorTag is the first element of an edge's Flight descriptor path.
const descriptorTag = "weir.edge.v1"

// descriptor is the Flight descriptor that names e on the stream's first message: the
// path [descriptorTag, up, down, generation] in decimal.
func (e Edge) descriptor() *flight.FlightDescriptor {
	return &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{
		descriptorTag,
		strconv.FormatUint(uint64(e.Up), 10),
		strconv.FormatUint(uint64(e.Down), 10),
		strconv.FormatUint(e.Generation, 10),
	}}
}

// parseDescriptor is the inverse of Edge.descriptor; it fails on anything else.
func parseDescriptor(d *flight.FlightDescriptor) (Edge, error) {
	if d == nil {
		return Edge{}, fmt.Errorf("exchange: stream's first message has no descriptor naming its edge")
	}
	p := d.GetPath()
	if d.GetType() != flight.DescriptorPATH || len(p) != 4 || p[0] != descriptorTag {
		return Edge{}, fmt.Errorf("exchange: descriptor %v does not name an edge (want path [%s, up, down, generation])", p, descriptorTag)
	}
	up, err1 := strconv.ParseUint(p[1], 10, 32)
	down, err2 := strconv.ParseUint(p[2], 10, 32)
	gen, err3 := strconv.ParseUint(p[3], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return Edge{}, fmt.Errorf("exchange: descriptor %v: actors and generation must be decimal integers", p)
	}
	return Edge{Up: executors.ActorID(up), Down: executors.ActorID(down), Generation: gen}, nil
}
