/*
Copyright 2026 The tailcut Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Process is a program a test or the local stack started, its output in
// logDir/Name.log. It is stopped by PID, never by name.
type Process struct {
	Name string
	Log  string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // its exit error, valid once done is closed
}

// StartProcess starts bin with args, with env added to this process's
// environment, in a process group of its own (a Ctrl-C in a terminal then
// reaches the caller's shutdown first, which stops every process in order).
func StartProcess(name, logDir string, env []string, bin string, args ...string) (*Process, error) {
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("starting %s (%s): %w", name, bin, err)
	}
	p := &Process{Name: name, cmd: cmd, Log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	return p, nil
}

// RunProcess starts a process for the test and stops it when the test ends,
// printing the end of its log when the test failed.
func RunProcess(tb testing.TB, name, logDir string, env []string, bin string, args ...string) *Process {
	tb.Helper()
	p, err := StartProcess(name, logDir, env, bin, args...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		p.Stop(10 * time.Second)
		if tb.Failed() {
			tb.Logf("%s log (pid %d), its end:\n%s", name, p.PID(), p.Tail())
		}
	})
	return p
}

// PID is the process's id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Exited reports whether the process has ended, with its error.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Wait waits for the process to end, at most timeout, and says whether it did.
func (p *Process) Wait(timeout time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// Stop sends SIGTERM, then SIGKILL after grace; killed says whether it came
// to that.
func (p *Process) Stop(grace time.Duration) (killed bool) {
	if done, _ := p.Exited(); done {
		return false
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if p.Wait(grace) {
		return false
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return true
}

// Tail is the end of the process's log, for error messages.
func (p *Process) Tail() string {
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return ""
	}
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}
