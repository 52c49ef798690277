package main

import (
	"bytes"
	"log/slog"
	"os"
	"syscall"

	"github.com/seed04fbb902/weir/engine/cluster/objstore"
)

// killMidUploadEnv names a file: a weir compute process started with it set kills
// itself with SIGKILL while it writes the second object (or a later one) of a
// checkpoint's upload, the first already complete in the bucket, once the file holds
// the process's node name (compute-<i>). It is a failpoint for the kill tests
// (TestClusterBackfillKill's mid-upload variant): the test writes the file when the
// backfill is where it wants the kill.
const killMidUploadEnv = "WEIR_KILL_MID_UPLOAD"

// armKillMidUpload sets the failpoint of killMidUploadEnv for node name, when the
// environment names a file.
func armKillMidUpload(logger *slog.Logger, name string) {
	path := os.Getenv(killMidUploadEnv)
	if path == "" {
		return
	}
	logger.Warn("failpoint armed: killed mid-upload when the file names this node", "file", path)
	objstore.TestingBeforeWrite = func(object string, k int) {
		if k == 0 {
			return
		}
		if b, err := os.ReadFile(path); err != nil || string(bytes.TrimSpace(b)) != name {
			return
		}
		logger.Warn("failpoint: SIGKILL mid-upload", "object", object)
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal ends the process
	}
}
