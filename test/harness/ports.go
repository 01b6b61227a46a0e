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

// Package harness is tailcut's shared test harness: what every test that
// runs servers needs, in one place instead of a copy per package. It starts
// with ports.
//
// # Ports
//
// A test must not pick a port by listening on 127.0.0.1:0, closing the
// listener and handing the number on. Until the new owner binds it, the
// kernel may give the same port to anything else that binds port 0: in
// issue #23 the xDS server of TestEnvoyEndToEnd took the port the test had
// just picked for Envoy, and Envoy could not bind it. So:
//
//   - An in-process server listens on 127.0.0.1:0 and reports the port it
//     got (its listener's Addr). The kernel gives a bound port to no one
//     else. Pass the listener, or the address it reports, to whatever
//     needs it.
//   - A process that must be told its port before it starts (Envoy's
//     listeners, Prometheus, istiod, an operator binary) gets one from
//     [Port] or [ReservePort].
//   - Envoy's admin interface can bind port 0 instead and write the address
//     it got to the file named by --admin-address-path; [AddressFromFile]
//     reads it.
//
// The ports [ReservePort] hands out lie below the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range, 32768-60999 by default), from
// which the kernel takes the ports of binds to port 0 and of outgoing
// connections: no in-process server, client or envtest API server can take
// a reserved port before its process binds it. Within a process no port is
// handed out twice, and each one is locked, for as long as the process
// lives, against the other processes that use this package: go test runs
// several test binaries at once.
package harness

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// lowestPort is where reserved ports start: above the fixed ports of
	// local demos (make demo's stack uses 19000-19103) and of Envoy's
	// defaults (9901, 10000).
	lowestPort = 20000
	// minRange is the fewest ports worth reserving from; below it the
	// reservation falls back to every port above lowestPort.
	minRange = 1000
	// attempts is how many candidate ports ReservePort tries.
	attempts = 500
)

// lockFileName is the file, in os.TempDir(), whose byte n a process locks
// while it holds port n.
const lockFileName = "tailcut-test-ports.lock"

var ports struct {
	mu sync.Mutex
	// handedOut holds every port this process reserved.
	handedOut map[int]bool
	// lock is the open lock file (nil when it could not be opened). Its
	// locks last as long as it stays open: it is never closed, and this
	// reference keeps it from being finalized.
	lock *os.File
	// lockErr is why the lock file could not be opened.
	lockErr error
	// lo and hi bound the ports handed out.
	lo, hi int
}

// Port reserves a loopback port for a process the test starts (see the
// package documentation) and fails the test if it cannot.
func Port(tb testing.TB) int {
	tb.Helper()
	p, err := ReservePort()
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// ReservePort reserves a loopback port for a process that must be told its
// port before it starts. Nothing in this process listens on the port when
// ReservePort returns; it will not hand the port out again, and other
// processes that use this package will not get it while this one runs.
func ReservePort() (int, error) {
	ports.mu.Lock()
	defer ports.mu.Unlock()
	if ports.handedOut == nil {
		ports.handedOut = map[int]bool{}
		ports.lo, ports.hi = portRange()
		ports.lock, ports.lockErr = os.OpenFile(filepath.Join(os.TempDir(), lockFileName), os.O_RDWR|os.O_CREATE, 0o666)
		if ports.lockErr != nil {
			ports.lock = nil
		}
	}
	for range attempts {
		p := ports.lo + rand.IntN(ports.hi-ports.lo+1)
		if ports.handedOut[p] {
			continue
		}
		if !lockPort(ports.lock, p) {
			continue
		}
		if err := PortFree(net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err != nil {
			// Someone outside this package listens there: keep the lock,
			// so no harness user tries it again, and skip it.
			ports.handedOut[p] = true
			continue
		}
		ports.handedOut[p] = true
		return p, nil
	}
	err := fmt.Errorf("no free loopback port in %d-%d after %d attempts (%d handed out by this process)", ports.lo, ports.hi, attempts, len(ports.handedOut))
	if ports.lockErr != nil {
		err = errors.Join(err, fmt.Errorf("without the lock file shared with other test processes: %w", ports.lockErr))
	}
	return 0, err
}

// PortFree binds addr and closes it again, and says what holds the port when
// the bind fails. It holds syscall.ForkLock meanwhile: a process this one
// forks while the check's listener is open inherits it until its exec, and
// the port then stays bound for a moment after the close. Two checks in a
// row beside a loop of exec'd programs: without the lock 46% of the second
// checks failed, with it 0-0.09% (a rarer leak remains, not yet found).
func PortFree(addr string) error {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		if _, port, splitErr := net.SplitHostPort(addr); splitErr == nil {
			if n, convErr := strconv.Atoi(port); convErr == nil {
				if holders := PortHolders(n); holders != "" {
					err = fmt.Errorf("%w; held: %s", err, holders)
				}
			}
		}
		return err
	}
	if err := l.Close(); err != nil {
		return fmt.Errorf("releasing the check of %s: %w", addr, err)
	}
	return nil
}

// lockPort locks byte p of the lock file, and says whether this process
// holds it. With no lock file every port counts as held: the listen check
// and the ephemeral range still keep in-process servers off it.
func lockPort(f *os.File, p int) bool {
	if f == nil {
		return true
	}
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: int64(p), Len: 1}
	for {
		err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk)
		if !errors.Is(err, syscall.EINTR) {
			return err == nil
		}
	}
}

// portRange is the range reserved ports come from: from lowestPort to the
// start of the kernel's ephemeral range or, if that leaves too few, above
// its end. A machine whose ephemeral range leaves no room gets every port
// above lowestPort; then a port 0 bind could still take a reserved port.
func portRange() (lo, hi int) {
	ephemeralLo, ephemeralHi := 32768, 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			l, errL := strconv.Atoi(f[0])
			h, errH := strconv.Atoi(f[1])
			if errL == nil && errH == nil && l <= h {
				ephemeralLo, ephemeralHi = l, h
			}
		}
	}
	switch {
	case ephemeralLo-1-lowestPort >= minRange:
		return lowestPort, ephemeralLo - 1
	case 65535-(ephemeralHi+1) >= minRange:
		return max(ephemeralHi+1, lowestPort), 65535
	default:
		return lowestPort, 65535
	}
}

// AddressFromFile waits until the file at path holds a loopback address
// (host:port) and returns it. Envoy, given --admin-address-path and an
// admin port of 0 in its bootstrap, writes there the address its admin
// interface bound.
func AddressFromFile(tb testing.TB, path string, timeout time.Duration) string {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			addr := strings.TrimSpace(string(b))
			if _, port, err := net.SplitHostPort(addr); err == nil && port != "" && port != "0" {
				return addr
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("no address in %s after %s (last read: %q, %v)", path, timeout, b, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
