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
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReservedPortsAreDistinctAndFree: no port twice, each one free to bind
// and outside the kernel's ephemeral range.
func TestReservedPortsAreDistinctAndFree(t *testing.T) {
	lo, hi := portRange()
	seen := map[int]bool{}
	for range 200 {
		p := Port(t)
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if p < lo || p > hi {
			t.Errorf("port %d outside %d-%d", p, lo, hi)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("reserved port %d is not free: %v", p, err)
		}
		_ = l.Close()
	}
	t.Logf("200 ports from %d-%d", lo, hi)
}

// TestPortZeroNeverGetsAReservedPort is issue #23's race: an in-process
// server binding port 0 while a reserved port waits for its process must
// not get that port.
func TestPortZeroNeverGetsAReservedPort(t *testing.T) {
	reserved := map[int]bool{}
	for range 50 {
		reserved[Port(t)] = true
	}
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for range 500 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
		if p := l.Addr().(*net.TCPAddr).Port; reserved[p] {
			t.Fatalf("a bind to port 0 got the reserved port %d", p)
		}
	}
}

// TestAnotherProcessCannotLockAReservedPort runs this test binary again:
// the child must find the parent's port locked, and a port nobody
// reserved free to lock.
func TestAnotherProcessCannotLockAReservedPort(t *testing.T) {
	if os.Getenv("HARNESS_CHILD_PORTS") != "" {
		return // the child runs TestChildLocks
	}
	mine := Port(t)
	if ports.lock == nil {
		t.Skipf("no lock file: %v", ports.lockErr)
	}
	ports.mu.Lock()
	free := 0
	for p := ports.lo; p <= ports.hi; p++ {
		if !ports.handedOut[p] {
			free = p
			break
		}
	}
	ports.mu.Unlock()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildLocks$", "-test.v")
	cmd.Env = append(os.Environ(), "HARNESS_CHILD_PORTS="+strconv.Itoa(mine)+","+strconv.Itoa(free))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "locked: false true") {
		t.Errorf("child could lock port %d (held here) or not port %d: %s", mine, free, out)
	}
}

// TestChildLocks is the child of TestAnotherProcessCannotLockAReservedPort.
func TestChildLocks(t *testing.T) {
	env := os.Getenv("HARNESS_CHILD_PORTS")
	if env == "" {
		t.Skip("run by TestAnotherProcessCannotLockAReservedPort")
	}
	held, free, _ := strings.Cut(env, ",")
	f, err := os.OpenFile(filepath.Join(os.TempDir(), lockFileName), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, _ := strconv.Atoi(held)
	n, _ := strconv.Atoi(free)
	t.Logf("locked: %v %v", lockPort(f, h), lockPort(f, n))
}

// TestPortHoldersNamesTheListener: a port this process listens on is named
// LISTEN with this process's pid; a port nobody uses names nothing.
func TestPortHoldersNamesTheListener(t *testing.T) {
	p := Port(t)
	if got := PortHolders(p); got != "" {
		t.Fatalf("PortHolders(%d) before anyone listens = %q, want none", p, got)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := PortHolders(p)
	if want := "LISTEN, pid " + strconv.Itoa(os.Getpid()) + " ("; !strings.HasPrefix(got, want) {
		t.Errorf("PortHolders(%d) = %q, want it to start %q", p, got, want)
	}
}

// TestPortFreeWaitsForAFork: the check's listener must not exist while a
// fork is under way (syscall.ForkLock held for writing, as os/exec holds it),
// or the child inherits it and keeps the port bound after the check.
func TestPortFreeWaitsForAFork(t *testing.T) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(Port(t)))
	syscall.ForkLock.Lock()
	done := make(chan error, 1)
	go func() { done <- PortFree(addr) }()
	select {
	case err := <-done:
		syscall.ForkLock.Unlock()
		t.Fatalf("PortFree returned (%v) while a fork held syscall.ForkLock", err)
	case <-time.After(200 * time.Millisecond):
	}
	syscall.ForkLock.Unlock()
	if err := <-done; err != nil {
		t.Fatalf("PortFree(%s) after the fork: %v", addr, err)
	}
}
