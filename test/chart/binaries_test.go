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

package chart

import (
	"bytes"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tailcut/tailcut/controllers/envoyconf"
	"github.com/tailcut/tailcut/controllers/verify"
	"github.com/tailcut/tailcut/test/harness"
)

// The manifests run the real binaries with the flags they give them: the
// operator, `tailcut bootstrap` and Envoy in the proxy pod, the workload and
// `tailcut verify` in the demo and the Helm test. A renamed flag fails here,
// not in a cluster.

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  string
)

// binary builds the operator ("tailcut") and the workload once per test run.
func binary(t *testing.T, name string) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tailcut-chart-bin-")
		if err != nil {
			buildErr = err.Error()
			return
		}
		buildDir = dir
		for out, pkg := range map[string]string{"tailcut": ".", "workload": "./test/workload"} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(dir, out), pkg)
			cmd.Dir = repo()
			if b, err := cmd.CombinedOutput(); err != nil {
				buildErr += "go build " + pkg + ": " + err.Error() + "\n" + string(b)
			}
		}
	})
	if buildErr != "" {
		t.Fatal(buildErr)
	}
	return filepath.Join(buildDir, name)
}

// expand replaces $(VAR) references the way the kubelet does for args.
func expand(args []string, env map[string]string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		for k, v := range env {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		out[i] = a
	}
	return out
}

// runWith runs bin and returns its combined output and error.
func runWith(bin string, env []string, args ...string) (string, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func deployment(t *testing.T, objs []*unstructured.Unstructured, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetName() == name && slices.Contains([]string{"Deployment", "StatefulSet", "Job", "Pod"}, o.GetKind()) {
			return o
		}
	}
	t.Fatalf("no workload %s", name)
	return nil
}

// The operator accepts every flag the chart and config/manager pass: with
// --help last, it exits 0 only when all flags before it parsed.
func TestOperatorAcceptsTheManifestsFlags(t *testing.T) {
	bin := binary(t, "tailcut")
	cases := map[string][]string{}
	for _, v := range []valueSet{valueSets[0], valueSets[4]} {
		cases["chart "+v.name] = containerArgs(t, deployment(t, render(t, v), "tailcut"), "manager")
	}
	cases["config/default"] = containerArgs(t, deployment(t, kustomizeDefault(t, false), "tailcut-controller-manager"), "manager")
	for name, args := range cases {
		if out, err := runWith(bin, nil, append(args, "--help")...); err != nil {
			t.Errorf("%s: tailcut %v: %v\n%s", name, args, err, out)
		}
	}
}

// The proxy's init container writes a bootstrap that the real Envoy accepts,
// run with the Envoy container's own flags (in validate mode).
func TestProxyBootstrapIsValidForEnvoy(t *testing.T) {
	envoy := tool(t, "envoy")
	objs := render(t, valueSets[4])
	proxy := deployment(t, objs, "tailcut-proxy")
	dir := t.TempDir()
	bootstrap := filepath.Join(dir, "envoy.yaml")
	// The proxy's xDS certificate, from the Secret the chart issued, where
	// the pod mounts it.
	tlsDir := filepath.Join(dir, "xds-tls")
	if err := os.Mkdir(tlsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() != "Secret" || o.GetName() != "tailcut-xds-proxy" {
			continue
		}
		data, _, _ := unstructured.NestedStringMap(o.Object, "data")
		for name, v := range data {
			b, err := base64.StdEncoding.DecodeString(v)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(tlsDir, name), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}

	// The hedge account's module, where the operator image has it
	// (Dockerfile).
	module := harness.HedgeAccountModule(t)
	args := expand(containerArgs(t, proxy, "bootstrap"), map[string]string{"POD_NAME": "tailcut-proxy-abc"})
	for i, a := range args {
		switch a {
		case "--output=/etc/envoy/envoy.yaml":
			args[i] = "--output=" + bootstrap
		case "--hedge-account-module=/hedge-account.wasm":
			args[i] = "--hedge-account-module=" + module
		}
		args[i] = strings.Replace(args[i], "=/etc/tailcut/xds-tls/", "="+tlsDir+"/", 1)
	}
	if !slices.Contains(args, "--hedge-account-module="+module) {
		t.Errorf("the bootstrap container does not copy the hedge account module from /hedge-account.wasm: %q", args)
	}
	if out, err := runWith(binary(t, "tailcut"), nil, args...); err != nil {
		t.Fatalf("tailcut %v: %v\n%s", args, err, out)
	}
	// The operator's listener loads the module from
	// envoyconf.DefaultHedgeAccountModule, in the bootstrap volume Envoy mounts.
	copied, want := mustRead(t, filepath.Join(dir, filepath.Base(envoyconf.DefaultHedgeAccountModule))), mustRead(t, module)
	if !bytes.Equal(copied, want) {
		t.Errorf("the module beside the bootstrap is %d bytes, want the %d of the image's", len(copied), len(want))
	}
	if mounts := volumeMounts(t, proxy, "envoy"); mounts[filepath.Dir(envoyconf.DefaultHedgeAccountModule)] != "bootstrap" {
		t.Errorf("Envoy mounts %v; the operator points it at %s, in the bootstrap volume", mounts, envoyconf.DefaultHedgeAccountModule)
	}
	b := string(mustRead(t, bootstrap))
	for _, want := range []string{"tailcut.chart-demo.svc", "18000", "9901", "9902", "tailcut_stats", "tailcut-proxy-abc"} {
		if !strings.Contains(b, want) {
			t.Errorf("the bootstrap lacks %q:\n%s", want, b)
		}
	}

	envoyArgs := containerArgs(t, proxy, "envoy")
	for i, a := range envoyArgs {
		if a == "/etc/envoy/envoy.yaml" {
			envoyArgs[i] = bootstrap
		}
	}
	envoyArgs = append(envoyArgs, "--mode", "validate")
	if out, err := runWith(envoy, nil, envoyArgs...); err != nil || !strings.Contains(out, "OK") {
		t.Errorf("envoy %v: %v\n%s", envoyArgs, err, out)
	}
}

// The demo workload accepts its flags and its WORKLOAD_CONFIG.
func TestWorkloadAcceptsTheDemoConfig(t *testing.T) {
	sts := deployment(t, render(t, valueSets[4]), "workload")
	env := containerEnv(t, sts, "workload")
	args := expand(containerArgs(t, sts, "workload"), map[string]string{"POD_NAME": "workload-0"})
	out, _ := runWith(binary(t, "workload"), []string{"WORKLOAD_CONFIG=" + env["WORKLOAD_CONFIG"]}, append(args, "--help")...)
	// The workload reads WORKLOAD_CONFIG, then the flags; --help stops it
	// after both were accepted.
	if !strings.Contains(out, "help requested") {
		t.Errorf("workload %v with WORKLOAD_CONFIG=%s:\n%s", args, env["WORKLOAD_CONFIG"], out)
	}
}

// The operator binary accepts the args of both pods that run tailcut verify
// (the demo's warm-up Job and the Helm test's Pod): they parse, and they make a run.
func TestVerifyJobsArgsAreAccepted(t *testing.T) {
	bin := binary(t, "tailcut")
	for _, v := range []valueSet{valueSets[4], valueSets[0]} {
		objs := render(t, v)
		for _, job := range []string{"tailcut-warmup", "tailcut-verify"} {
			if !has(objs, "Job", job) && !has(objs, "Pod", job) {
				continue
			}
			args := containerArgs(t, deployment(t, objs, job), job[len("tailcut-"):])
			if len(args) == 0 || args[0] != "verify" {
				t.Fatalf("%s %s: args %q do not run tailcut verify", v.name, job, args)
			}
			if err := verify.CheckArgs(args[1:]); err != nil {
				t.Errorf("%s %s: tailcut %q: %v", v.name, job, args, err)
			}
			if out, err := runWith(bin, nil, append(args, "--help")...); err != nil {
				t.Errorf("%s %s: tailcut %v --help: %v\n%s", v.name, job, args, err, out)
			}
		}
	}
}

func has(objs []*unstructured.Unstructured, kind, name string) bool {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return true
		}
	}
	return false
}

// volumeMounts maps a container's mount paths to their volumes.
func volumeMounts(t *testing.T, o *unstructured.Unstructured, name string) map[string]string {
	t.Helper()
	out := map[string]string{}
	mounts, _ := container(t, o, name)["volumeMounts"].([]any)
	for _, m := range mounts {
		mm := m.(map[string]any)
		out[mm["mountPath"].(string)], _ = mm["name"].(string)
	}
	return out
}
