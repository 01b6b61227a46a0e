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
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// PrometheusSeries reads url (an Envoy's /stats/prometheus) as Prometheus
// would and returns every sample of the metric family name, keyed by its
// labels ("a=x,b=y", sorted; "" for none). A family the page lacks gives an
// empty map; the page's names are in the test's log then.
func PrometheusSeries(tb testing.TB, url, name string) map[string]float64 {
	tb.Helper()
	resp, err := http.Get(url)
	if err != nil {
		tb.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		tb.Fatalf("GET %s: %s %v", url, resp.Status, err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		tb.Fatalf("GET %s: %v", url, err)
	}
	out := map[string]float64{}
	fam, ok := families[name]
	if !ok {
		names := make([]string, 0, len(families))
		for n := range families {
			names = append(names, n)
		}
		sort.Strings(names)
		tb.Logf("%s has no %s; it has %s", url, name, strings.Join(names, " "))
		return out
	}
	for _, m := range fam.GetMetric() {
		labels := make([]string, 0, len(m.GetLabel()))
		for _, l := range m.GetLabel() {
			labels = append(labels, fmt.Sprintf("%s=%s", l.GetName(), l.GetValue()))
		}
		sort.Strings(labels)
		v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
		out[strings.Join(labels, ",")] = v
	}
	return out
}
