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

package localstack

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tailcut/tailcut/test/harness"
)

// Faults for the chaos tests: each acts on one process of the stack, by PID.

// KillOperator kills the operator at once (SIGKILL), as a lost node would.
func (s *Stack) KillOperator() error { return s.kill("tailcut") }

// StopOperator stops the operator as the kubelet stops a deleted Pod: SIGTERM,
// then SIGKILL after grace (the chart's terminationGracePeriodSeconds). It
// returns how long the operator took to exit, and fails when it needed the
// SIGKILL.
func (s *Stack) StopOperator(grace time.Duration) (time.Duration, error) {
	p := s.running("tailcut")
	if p == nil {
		return 0, fmt.Errorf("tailcut is not running")
	}
	defer s.forget(p)
	start := time.Now()
	if p.Stop(grace) {
		return time.Since(start), fmt.Errorf("the operator was still running %s after SIGTERM, and was killed:\n%s", grace, p.Tail())
	}
	return time.Since(start), nil
}

// RestartOperator starts the operator again, with the same flags, and waits
// until it is ready (it serves xDS only after its first full translation).
func (s *Stack) RestartOperator(ctx context.Context) error {
	s.restarts++
	return s.runOperator(ctx, fmt.Sprintf("tailcut-restart-%d", s.restarts))
}

// ReplicaPorts are a second operator replica's own ports, and those of the
// Envoy that follows it.
type ReplicaPorts struct {
	XDS, Metrics, Probe, Listener, Admin int
}

// StartReplica starts a second operator replica (Options.LeaderElect) on the
// same API server, with its own xDS, metrics and probe ports and its own
// listener port for its Envoys, and an Envoy on it. It returns once both are
// ready: a replica that is not the leader serves the leader's decisions.
func (s *Stack) StartReplica(ctx context.Context, name string, p ReplicaPorts) error {
	if !s.opts.LeaderElect {
		return fmt.Errorf("a second replica needs Options.LeaderElect")
	}
	args := make([]string, 0, len(s.operatorArgs))
	for _, a := range s.operatorArgs {
		switch {
		case strings.HasPrefix(a, "--xds-address="):
			a = "--xds-address=" + addr(p.XDS)
		case strings.HasPrefix(a, "--metrics-bind-address="):
			a = "--metrics-bind-address=" + addr(p.Metrics)
		case strings.HasPrefix(a, "--health-probe-bind-address="):
			a = "--health-probe-bind-address=" + addr(p.Probe)
		case strings.HasPrefix(a, "--envoy-listener-port="):
			a = "--envoy-listener-port=" + strconv.Itoa(p.Listener)
		case strings.HasPrefix(a, "--replica-name="):
			a = "--replica-name=" + name
		}
		args = append(args, a)
	}
	proc, err := harness.StartProcess(name, s.dir("logs"), s.operatorEnv, s.bins["tailcut"], args...)
	if err != nil {
		return err
	}
	s.procs = append(s.procs, proc)
	if err := waitHTTP(ctx, proc, "http://"+addr(p.Probe)+"/readyz", 60*time.Second); err != nil {
		return err
	}
	return s.runEnvoy(ctx, name+"-envoy", p.XDS, p.Listener, p.Admin)
}

// StopPrometheus stops Prometheus (SIGTERM); StartPrometheus starts it again
// on the same port and data.
func (s *Stack) StopPrometheus() error {
	p := s.running("prometheus")
	if p == nil {
		return fmt.Errorf("prometheus is not running")
	}
	p.Stop(10 * time.Second)
	s.forget(p)
	return nil
}

// StartPrometheus starts Prometheus again after StopPrometheus.
func (s *Stack) StartPrometheus(ctx context.Context) error {
	s.restarts++
	return s.runPrometheus(ctx, fmt.Sprintf("prometheus-restart-%d", s.restarts))
}

func (s *Stack) kill(name string) error {
	p := s.running(name)
	if p == nil {
		return fmt.Errorf("%s is not running", name)
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	if !p.Wait(time.Minute) {
		return fmt.Errorf("%s (pid %d) did not end within a minute of SIGKILL", name, p.PID())
	}
	s.forget(p)
	return nil
}

// running is the live process whose name is name or a restart of it.
func (s *Stack) running(name string) *harness.Process {
	for _, p := range s.procs {
		if done, _ := p.Exited(); !done && (p.Name == name || strings.HasPrefix(p.Name, name+"-restart-")) {
			return p
		}
	}
	return nil
}

func (s *Stack) forget(p *harness.Process) {
	s.procs = slices.DeleteFunc(s.procs, func(q *harness.Process) bool { return q == p })
}
