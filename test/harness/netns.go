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
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"
)

// privateNetworkEnv marks the run of a test inside its own network
// namespace, with the test's name as its value.
const privateNetworkEnv = "TAILCUT_PRIVATE_NETWORK"

// InPrivateNetwork runs the calling test again, alone, in a network namespace
// of its own (unshare, loopback up), for a test whose servers bind every
// address with no setting to change it (Envoy Gateway binds 0.0.0.0 on five
// ports): there, every address is the namespace's loopback, and nothing is
// reachable from outside it. It returns true in the calling test, after the
// run (whose output it logs, and whose failure fails the test), and false in
// the run itself, which goes on with the test's body.
func InPrivateNetwork(t *testing.T) bool {
	t.Helper()
	if os.Getenv(privateNetworkEnv) == t.Name() {
		return false
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatalf("unshare (util-linux) is needed to run %s in a network namespace of its own: %v", t.Name(), err)
	}
	flags := "-n"
	if os.Geteuid() != 0 {
		flags = "-rn" // a user namespace gives an unprivileged user the right
	}
	args := []string{flags, "--", "sh", "-c", `ip link set lo up && exec "$@"`, "sh",
		os.Args[0], "-test.run=^" + regexp.QuoteMeta(t.Name()) + "$", "-test.v", "-test.count=1"}
	if deadline, ok := t.Deadline(); ok {
		args = append(args, "-test.timeout="+time.Until(deadline).Round(time.Second).String())
	}
	cmd := exec.Command(unshare, args...)
	cmd.Env = append(os.Environ(), privateNetworkEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	t.Logf("%s in its own network namespace:\n%s", t.Name(), out)
	if err != nil {
		t.Fatalf("%s failed in its own network namespace (%s %v): %v", t.Name(), unshare, flags, err)
	}
	return true
}
