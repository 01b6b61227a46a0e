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

// Package chart checks what users install: the Helm chart in charts/tailcut and
// the kustomize tree in config/. It renders both with the pinned helm and
// kustomize, applies every object with server-side dry-run to a real
// kube-apiserver (envtest) that has the Prometheus Operator CRDs, checks every
// pod spec against Pod Security "restricted" with the API server's admission,
// parses every PromQL expression of the dashboards and alerts, and runs the
// operator and workload binaries with the flags the manifests give them.
package chart

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tailcut/tailcut/test/envtestutil"
)

// PrometheusOperatorVersion pins the Go module whose example/prometheus-operator-crd
// folder provides the monitoring.coreos.com CRDs (ServiceMonitor,
// PrometheusRule, ...) for the API server.
const PrometheusOperatorVersion = "v0.85.0"

const prometheusOperatorModule = "github.com/prometheus-operator/prometheus-operator"

var (
	testEnv  *envtest.Environment
	k8s      client.Client
	warnings = &warningRecorder{}
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	crds, err := prometheusOperatorCRDs()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env, cfg, err := envtestutil.Start(crds)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	testEnv = env
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping envtest:", err)
		}
	}()
	// Every warning the API server sends (Pod Security "would violate", unknown
	// fields, deprecated APIs) fails the request that caused it.
	cfg = rest.CopyConfig(cfg)
	cfg.WarningHandlerWithContext = warnings
	k8s, err = client.New(cfg, client.Options{Scheme: envtestutil.Scheme()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// prometheusOperatorCRDs downloads the pinned prometheus-operator module into
// the Go module cache (a no-op when it is there) and returns its CRD folder.
// It runs outside this repository's module so that go.mod is never touched.
func prometheusOperatorCRDs() (string, error) {
	dir, err := os.MkdirTemp("", "tailcut-promop-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	mod := prometheusOperatorModule + "@" + PrometheusOperatorVersion
	cmd := exec.Command("go", "mod", "download", "-json", mod)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %w\n%s%s", mod, err, out, stderr.Bytes())
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out, &info); err != nil {
		return "", fmt.Errorf("go mod download %s: %w\n%s", mod, err, out)
	}
	if info.Error != "" || info.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %s", mod, info.Error)
	}
	crds := filepath.Join(info.Dir, "example", "prometheus-operator-crd")
	if _, err := os.Stat(filepath.Join(crds, "monitoring.coreos.com_servicemonitors.yaml")); err != nil {
		return "", fmt.Errorf("%s has no ServiceMonitor CRD: %w", mod, err)
	}
	return crds, nil
}

// warningRecorder keeps the API server's warnings since the last take.
type warningRecorder struct {
	mu   sync.Mutex
	list []string
}

func (w *warningRecorder) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warningRecorder) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

// repo returns a path below the repository root.
func repo(elem ...string) string {
	return filepath.Join(append([]string{envtestutil.RepoRoot()}, elem...)...)
}

var (
	toolMu    sync.Mutex
	toolPaths = map[string]string{}
)

// tool returns the pinned binary of name: $<NAME>_BIN when set (the Makefile
// may export it), else `hack/tools.sh <name>`, which installs it if missing.
// A tool that cannot be had fails the test; it never skips.
func tool(t *testing.T, name string) string {
	t.Helper()
	toolMu.Lock()
	defer toolMu.Unlock()
	if p, ok := toolPaths[name]; ok {
		return p
	}
	env := strings.ToUpper(name) + "_BIN"
	if p := os.Getenv(env); p != "" {
		toolPaths[name] = p
		return p
	}
	cmd := exec.Command("bash", repo("hack", "tools.sh"), name)
	cmd.Dir = repo()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/tools.sh %s: %v\n%s", name, err, stderr.String())
	}
	p := strings.TrimSpace(string(out))
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("hack/tools.sh %s printed %q: %v", name, p, err)
	}
	toolPaths[name] = p
	return p
}

// execute runs bin with args in the repository root and returns its stdout;
// a failure includes stderr.
func execute(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = repo()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(bin), strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return stdout.Bytes()
}

// runCombined runs bin with args in the repository root and returns its
// combined output, for commands that are expected to fail.
func runCombined(bin string, args ...string) (string, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = repo()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// decodeObjects splits a multi-document YAML stream into objects, skipping
// empty documents.
func decodeObjects(t *testing.T, stream []byte) []*unstructured.Unstructured {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(stream)))
	var objs []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("reading YAML: %v", err)
		}
		// utilyaml.Unmarshal keeps integers int64, as the API machinery does.
		var m map[string]any
		if err := utilyaml.Unmarshal(doc, &m); err != nil {
			t.Fatalf("decoding YAML document: %v\n%s", err, doc)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetAPIVersion() == "" || u.GetKind() == "" {
			t.Fatalf("document without apiVersion or kind:\n%s", doc)
		}
		objs = append(objs, u)
	}
}

// ref names an object in messages: Kind/namespace/name.
func ref(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetKind() + "/" + u.GetName()
	}
	return u.GetKind() + "/" + u.GetNamespace() + "/" + u.GetName()
}

// byKind returns the objects of one kind.
func byKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}
