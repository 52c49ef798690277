package s3test

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill cmd's process when the test binary that started
// it ends without Stop (a panic, a kill): no server outlives its test.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
