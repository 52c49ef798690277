//go:build !linux

package s3test

import "os/exec"

// dieWithParent does nothing where the kernel cannot kill a child with its parent:
// a test binary that ends without Stop leaves its server there.
func dieWithParent(*exec.Cmd) {}
