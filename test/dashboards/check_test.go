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

package dashboards

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// instantProm answers instant queries: a series unless the query names
// "empty", an error when it names "broken".
type instantProm struct {
	promv1.API
	seen []string
}

func (p *instantProm) Query(_ context.Context, q string, _ time.Time, _ ...promv1.Option) (model.Value, promv1.Warnings, error) {
	p.seen = append(p.seen, q)
	switch {
	case strings.Contains(q, "broken"):
		return nil, nil, errors.New("bad_data: parse error")
	case strings.Contains(q, "empty"):
		return model.Vector{}, nil, nil
	}
	return model.Vector{&model.Sample{Value: 1}}, nil, nil
}

func TestCheckQueries(t *testing.T) {
	dir := t.TempDir()
	dash := `{"title": "t", "templating": {"list": [{"name": "ns", "type": "custom"}]},
	  "panels": [
	    {"title": "ok", "targets": [{"refId": "A", "expr": "up{namespace=\"$ns\"}"}]},
	    {"title": "no data", "targets": [{"refId": "A", "expr": "empty_metric"}]},
	    {"title": "nacks", "targets": [{"refId": "A", "expr": "empty_tailcut_xds_nacks_total"}]},
	    {"title": "error", "targets": [{"refId": "A", "expr": "broken("}]},
	    {"title": "unknown var", "targets": [{"refId": "A", "expr": "up{pod=\"$pod\"}"}]}
	  ]}`
	if err := os.WriteFile(filepath.Join(dir, "t.json"), []byte(dash), 0o644); err != nil {
		t.Fatal(err)
	}
	prom := &instantProm{}
	ran, failures, err := CheckQueries(context.Background(), prom, dir, map[string]string{"ns": "demo"})
	if err != nil {
		t.Fatal(err)
	}
	if ran != 4 {
		t.Errorf("ran %d queries, want 4 (the one with an unknown variable is not sent)", ran)
	}
	if prom.seen[0] != `up{namespace="demo"}` {
		t.Errorf("first query %q: the variable was not substituted", prom.seen[0])
	}
	want := []string{`panel no data query A returned no data`, `panel error query A: bad_data`, `panel unknown var query A: [$pod is not a variable`}
	if len(failures) != len(want) {
		t.Fatalf("failures:\n%s\nwant %d", strings.Join(failures, "\n"), len(want))
	}
	for i, w := range want {
		if !strings.Contains(failures[i], w) {
			t.Errorf("failure %d = %q, want it to contain %q", i, failures[i], w)
		}
	}
}
