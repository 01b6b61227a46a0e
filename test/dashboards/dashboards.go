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

// Package dashboards reads the chart's Grafana dashboards and yields their
// PromQL queries with Grafana's variables replaced, so tests can parse them
// (test/chart) and run them against a real Prometheus (test/localstack).
package dashboards

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Dashboard is the part of a Grafana dashboard the tests read.
type Dashboard struct {
	File       string                    `json:"-"`
	UID        string                    `json:"uid"`
	Title      string                    `json:"title"`
	Panels     []Panel                   `json:"panels"`
	Templating struct{ List []Variable } `json:"templating"`
}

// Panel is a Grafana panel; rows nest panels.
type Panel struct {
	ID         int            `json:"id"`
	Title      string         `json:"title"`
	Type       string         `json:"type"`
	Datasource map[string]any `json:"datasource"`
	Targets    []Target       `json:"targets"`
	Panels     []Panel        `json:"panels"`
}

// Target is one query of a panel.
type Target struct {
	Expr       string         `json:"expr"`
	RefID      string         `json:"refId"`
	Datasource map[string]any `json:"datasource"`
}

// Variable is a templating variable.
type Variable struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Definition string `json:"definition"`
}

// Query is one PromQL expression of a dashboard.
type Query struct {
	Dashboard string // file name
	Where     string // "panel <title> query <refId>" or "variable <name>"
	Panel     *Panel // nil for a variable's query
	Expr      string // with Grafana's variables still in it
}

// Load reads every *.json file in dir.
func Load(dir string) ([]Dashboard, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var out []Dashboard
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var d Dashboard
		if err := json.Unmarshal(b, &d); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Base(f), err)
		}
		d.File = filepath.Base(f)
		out = append(out, d)
	}
	return out, nil
}

// VariableNames are the names the dashboard defines.
func (d Dashboard) VariableNames() []string {
	var names []string
	for _, v := range d.Templating.List {
		names = append(names, v.Name)
	}
	return names
}

// labelValues matches Grafana's label_values(selector, label) variable query.
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

// Queries returns the panels' queries and the selectors of label_values
// variables. A query variable of another form is an error.
func (d Dashboard) Queries() ([]Query, error) {
	var out []Query
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			return nil, fmt.Errorf("%s: variable %s: query %q is not label_values(selector, label)", d.File, v.Name, v.Definition)
		}
		out = append(out, Query{Dashboard: d.File, Where: "variable " + v.Name, Expr: m[1]})
	}
	var walk func([]Panel)
	walk = func(ps []Panel) {
		for i := range ps {
			p := &ps[i]
			walk(p.Panels)
			for _, tg := range p.Targets {
				out = append(out, Query{Dashboard: d.File, Where: "panel " + p.Title + " query " + tg.RefID, Panel: p, Expr: tg.Expr})
			}
		}
	}
	walk(d.Panels)
	return out, nil
}

// grafanaVar matches $name, ${name} and ${name:format}.
var grafanaVar = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)`)

// Substitute replaces Grafana variables with values. It reports variables that
// have no value, or that the dashboard does not define (built-ins start with __).
func Substitute(expr string, defined []string, values map[string]string) (string, []string) {
	var problems []string
	out := grafanaVar.ReplaceAllStringFunc(expr, func(m string) string {
		sub := grafanaVar.FindStringSubmatch(m)
		name := sub[1] + sub[2]
		if !strings.HasPrefix(name, "__") && !slices.Contains(defined, name) {
			problems = append(problems, "$"+name+" is not a variable of the dashboard")
		}
		v, ok := values[name]
		if !ok {
			problems = append(problems, "$"+name+" has no value")
			return m
		}
		return v
	})
	return out, problems
}
