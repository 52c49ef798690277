package meta_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/seed04fbb902/weir/engine/cluster/meta"
)

// TestNodeIncarnation: every registration of a node bumps its incarnation; only the
// current one passes CheckIncarnation, and a node never registered is unknown.
func TestNodeIncarnation(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s, _ := newStore(t)
	first, err := s.RegisterNode(ctx, "n1", "", "127.0.0.1:7001")
	if err != nil {
		t.Fatal(err)
	}
	if first != 1 {
		t.Fatalf("first incarnation = %d, want 1", first)
	}
	if err := s.CheckIncarnation(ctx, "n1", first); err != nil {
		t.Fatalf("current incarnation refused: %v", err)
	}
	second, err := s.RegisterNode(ctx, "n1", "backfill", "127.0.0.1:7002")
	if err != nil {
		t.Fatal(err)
	}
	if second != 2 {
		t.Fatalf("second incarnation = %d, want 2", second)
	}
	err = s.CheckIncarnation(ctx, "n1", first)
	if !errors.Is(err, meta.ErrStaleIncarnation) || !strings.Contains(err.Error(), `node "n1" incarnation 1`) {
		t.Fatalf("stale incarnation: %v, want ErrStaleIncarnation naming node n1 and incarnation 1", err)
	}
	if err := s.CheckIncarnation(ctx, "n1", 3); !errors.Is(err, meta.ErrStaleIncarnation) {
		t.Fatalf("incarnation never handed out: %v, want ErrStaleIncarnation", err)
	}
	if err := s.CheckIncarnation(ctx, "n1", second); err != nil {
		t.Fatalf("current incarnation refused: %v", err)
	}
	if err := s.CheckIncarnation(ctx, "n2", 1); !errors.Is(err, meta.ErrUnknownNode) {
		t.Fatalf("unregistered node: %v, want ErrUnknownNode", err)
	}
	if _, err := s.RegisterNode(ctx, "n0", "", "127.0.0.1:7000"); err != nil {
		t.Fatal(err)
	}
	nodes, err := s.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 2 || nodes[0].Name != "n0" || nodes[1].Name != "n1" ||
		nodes[1].Role != "backfill" || nodes[1].Addr != "127.0.0.1:7002" || nodes[1].Incarnation != 2 || nodes[1].Registered.IsZero() {
		t.Fatalf("nodes = %+v, want n0 and n1 (backfill at 127.0.0.1:7002, incarnation 2)", nodes)
	}
	for _, bad := range []string{"", "n\x00", "\xfe"} {
		if _, err := s.RegisterNode(ctx, bad, "", ""); err == nil {
			t.Errorf("register node %q succeeded", bad)
		}
	}
}
