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

package estimate

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/template"
	"text/template/parse"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// A Custom query is written by whoever may edit HedgePolicies in a namespace,
// and the operator runs it with its own rights. Two rules keep that safe:
//   - the template is data: text and the documented variables, nothing else.
//     A template is a program otherwise; {{range 100000000000}} kept a
//     reconcile worker busy and its output grew without bound;
//   - every series it reads carries the policy's namespace, so that
//     status.quantile cannot show another namespace's metrics.

// customVariables are the variables a Custom query template may use.
var customVariables = []string{"Namespace", "Service", "Port", "Quantile", "Window"}

// maxRenderedQuery bounds a rendered Custom query. The template is at most
// 4,096 characters (the API's limit) and each variable a few dozen.
const maxRenderedQuery = 16 << 10

// renderCustom renders a Custom query template after checking that it holds
// only text and plain variables.
func renderCustom(text string, data map[string]any) (string, error) {
	t, err := template.New("custom").Option("missingkey=error").Parse(text)
	if err != nil {
		return "", &templateError{problem: "the template does not parse", err: err}
	}
	if t.Tree != nil {
		for _, n := range t.Root.Nodes {
			if err := plainNode(n); err != nil {
				return "", &templateError{problem: "the template may use only " + variableList(), err: err}
			}
		}
	}
	if len(t.Templates()) > 1 {
		return "", &templateError{problem: "the template may use only " + variableList(), err: errors.New("it defines templates")}
	}
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return "", &templateError{problem: "the template does not render", err: err}
	}
	if b.Len() > maxRenderedQuery {
		return "", &templateError{problem: "the rendered query is too long", err: fmt.Errorf("%d bytes, at most %d", b.Len(), maxRenderedQuery)}
	}
	return b.String(), nil
}

// plainNode accepts text and {{.Variable}} of the documented variables.
func plainNode(n parse.Node) error {
	switch n := n.(type) {
	case *parse.TextNode:
		return nil
	case *parse.ActionNode:
		p := n.Pipe
		if len(p.Decl) == 0 && len(p.Cmds) == 1 && len(p.Cmds[0].Args) == 1 {
			if f, ok := p.Cmds[0].Args[0].(*parse.FieldNode); ok && len(f.Ident) == 1 && slices.Contains(customVariables, f.Ident[0]) {
				return nil
			}
		}
		return fmt.Errorf("%s is not one of them", clip(n.String()))
	default:
		// range, if, with, template, block, comments, and whatever comes next.
		return fmt.Errorf("%s is not one of them", clip(n.String()))
	}
}

func variableList() string {
	vs := make([]string, 0, len(customVariables))
	for _, v := range customVariables {
		vs = append(vs, "{{."+v+"}}")
	}
	return strings.Join(vs, ", ")
}

// checkNamespaced checks that every series selector in expr carries
// namespace="<ns>", or names one of the policy's own Envoy clusters.
func checkNamespaced(expr parser.Expr, ns string, ownClusters []string) error {
	var bad []string
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		for _, m := range vs.LabelMatchers {
			if m.Type != labels.MatchEqual {
				continue
			}
			if (m.Name == "namespace" && m.Value == ns) || (m.Name == envoyClusterLabel && slices.Contains(ownClusters, m.Value)) {
				return nil
			}
		}
		bad = append(bad, vs.String())
		return nil
	})
	if len(bad) == 0 {
		return nil
	}
	return &templateError{
		problem: fmt.Sprintf(`every series the query reads must carry namespace="%s" (write namespace="{{.Namespace}}")`, ns),
		err:     fmt.Errorf("%s does not", clip(strings.Join(bad, ", "))),
	}
}
