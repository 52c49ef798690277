package pgtest

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// A server whose starting process ends without Stop is stopped by its reaper, and
// its directory removed. The process watched here is a child that exits at once, in
// place of a test binary that panicked.
func TestReaperStopsAnOrphanedServer(t *testing.T) {
	s, err := Start("weir-pgtest")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	child := exec.Command("sleep", "0.2")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	if err := s.startReaper(child.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if err := child.Wait(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, statErr := os.Stat(s.dir)
		if os.IsNotExist(statErr) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server in %s still runs, or its directory is left, 20 s after its process ended", s.dir)
		}
	}
	if out, err := exec.Command(s.script, "status", s.dir, s.port).CombinedOutput(); err == nil {
		t.Fatalf("%s status: the server still runs: %s", s.script, out)
	}
	os.RemoveAll(s.dir) // status recreated it
}
