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

package envoyconf

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/test/harness"
)

func loadCase(t *testing.T, path string) ([]plan.RoutePlan, TranslateOptions) {
	t.Helper()
	c := harness.LoadPlanCase(t, path)
	return c.Plans, TranslateOptions{ListenerAddress: c.ListenerAddress, ListenerPort: c.ListenerPort}
}

// caseNames are the golden cases: testdata/in/<case>.yaml.
func caseNames(t *testing.T) []string {
	t.Helper()
	ins, err := filepath.Glob(filepath.Join("testdata", "in", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, in := range ins {
		names = append(names, strings.TrimSuffix(filepath.Base(in), ".yaml"))
	}
	return names
}

// TestTranslateGolden writes each case's resources, one file per kind:
// testdata/out/<case>.<kind>.yaml.
func TestTranslateGolden(t *testing.T) {
	harness.GoldenCases(t, "./controllers/envoyconf", 10, func(t *testing.T, in string) map[string][]byte {
		plans, opts := loadCase(t, in)
		res, err := Translate(plans, opts)
		if err != nil {
			t.Fatalf("Translate: %v", err)
		}
		out := map[string][]byte{}
		for kind, msgs := range map[string]func() ([]byte, error){
			"listeners": func() ([]byte, error) { return MessagesYAML(res.Listeners) },
			"routes":    func() ([]byte, error) { return MessagesYAML(res.Routes) },
			"clusters":  func() ([]byte, error) { return MessagesYAML(res.Clusters) },
			"endpoints": func() ([]byte, error) { return MessagesYAML(res.Endpoints) },
		} {
			b, err := msgs()
			if err != nil {
				t.Fatal(err)
			}
			out["."+kind+".yaml"] = b
		}
		return out
	})
}

func TestTranslateDeterministic(t *testing.T) {
	plans, opts := loadCase(t, filepath.Join("testdata", "in", "sorted-plans.yaml"))
	a, err := Translate(plans, opts)
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(plans)
	b, err := Translate(plans, opts)
	if err != nil {
		t.Fatal(err)
	}
	va := a.Version()
	vb := b.Version()
	if va != vb || len(va) != 16 {
		t.Fatalf("versions differ for the same plans in another order: %q vs %q", va, vb)
	}
	plans[0].Hedge.Delay += time.Millisecond
	c, err := Translate(plans, opts)
	if err != nil {
		t.Fatal(err)
	}
	if vc := c.Version(); vc == va {
		t.Fatalf("version %s did not change with the delay", vc)
	}
}

func TestTranslateErrors(t *testing.T) {
	plans, opts := loadCase(t, filepath.Join("testdata", "in", "auto-delay.yaml"))
	dup := plans[0]
	dup.Name = "shop/other"
	if _, err := Translate([]plan.RoutePlan{plans[0], dup}, opts); !errors.Is(err, plan.ErrDuplicateTarget) {
		t.Errorf("two plans for one service port: got %v, want ErrDuplicateTarget", err)
	}
}
