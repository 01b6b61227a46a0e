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

// Package envtestutil starts a real kube-apiserver and etcd (controller-runtime
// envtest) with tailcut's CRDs installed. The binaries come from hack/tools.sh;
// a missing binary fails the test run loudly, it never skips.
package envtestutil

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

// RepoRoot is the repository's top directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Scheme has the client-go types and tailcut's API.
func Scheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := tailcutv1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// IstioCRDs is the file of Istio's CRDs in the istio.io/api module that
// go.mod names. `go mod download` fetches the module when this machine's
// module cache lacks it: a package's tests can run alone on a fresh machine,
// where `go test ./...` would have downloaded it for the Istio publisher's
// tests.
func IstioCRDs() (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", "istio.io/api")
	cmd.Dir = RepoRoot()
	out, err := cmd.Output()
	var mod struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &mod); err != nil || jerr != nil || mod.Error != "" {
		return "", fmt.Errorf("downloading the istio.io/api module (go mod download istio.io/api): %v %v %s", err, jerr, mod.Error)
	}
	path := filepath.Join(mod.Dir, "kubernetes", "customresourcedefinitions.gen.yaml")
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("the Istio CRDs: %w", err)
	}
	return path, nil
}

// EnvoyGatewayCRDs are the Gateway API CRDs and Envoy Gateway's
// EnvoyPatchPolicy CRD, from the Envoy Gateway module that built bin (its
// Helm chart's CRDs). `go mod download` fetches the module when this
// machine's module cache lacks it.
func EnvoyGatewayCRDs(bin string) ([]string, error) {
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("go version -m %s: %w", bin, err)
	}
	version := ""
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "mod" && f[1] == "github.com/envoyproxy/gateway" {
			version = f[2]
		}
	}
	if version == "" {
		return nil, fmt.Errorf("%s was not built from the module github.com/envoyproxy/gateway", bin)
	}
	cmd := exec.Command("go", "mod", "download", "-json", "github.com/envoyproxy/gateway@"+version)
	cmd.Dir = RepoRoot()
	out, err = cmd.Output()
	var mod struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &mod); err != nil || jerr != nil || mod.Error != "" {
		return nil, fmt.Errorf("downloading github.com/envoyproxy/gateway@%s: %v %v %s", version, err, jerr, mod.Error)
	}
	crds := filepath.Join(mod.Dir, "charts", "gateway-helm", "charts", "crds", "crds")
	paths := []string{filepath.Join(crds, "gatewayapi-crds.yaml"), filepath.Join(crds, "generated", "gateway.envoyproxy.io_envoypatchpolicies.yaml")}
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("the CRDs in the Envoy Gateway module: %w", err)
		}
	}
	return paths, nil
}

// Start starts an API server with the CRDs in extraCRDDirs (directories or
// files) besides tailcut's.
func Start(extraCRDDirs ...string) (*envtest.Environment, *rest.Config, error) {
	return StartWith(func(*envtest.Environment) {}, extraCRDDirs...)
}

// StartWith is Start with the environment changed by configure first (for
// example, the API server's flags).
func StartWith(configure func(*envtest.Environment), extraCRDDirs ...string) (*envtest.Environment, *rest.Config, error) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return nil, nil, fmt.Errorf("KUBEBUILDER_ASSETS is not set: run the tests with `make test`, " +
			"or export the value printed by `hack/tools.sh env`")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			return nil, nil, fmt.Errorf("KUBEBUILDER_ASSETS=%s has no %s: %w (run `hack/tools.sh env`)", assets, bin, err)
		}
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     append([]string{filepath.Join(RepoRoot(), "config", "crd", "bases")}, extraCRDDirs...),
		ErrorIfCRDPathMissing: true,
		Scheme:                Scheme(),
	}
	configure(env)
	cfg, err := env.Start()
	if err != nil {
		return nil, nil, fmt.Errorf("starting kube-apiserver and etcd: %w", err)
	}
	return env, cfg, nil
}

// WriteKubeconfig writes a kubeconfig for a cluster-admin user of env to path,
// for the command-line tools (kubectl, helm) and processes a test starts.
func WriteKubeconfig(env *envtest.Environment, userName, path string) error {
	user, err := env.AddUser(envtest.User{Name: userName, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	b, err := user.KubeConfig()
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}
