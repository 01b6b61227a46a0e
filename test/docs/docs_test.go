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

// Package docs checks the user documentation against the repository: the
// README's size, the links between pages, and the troubleshooting table
// against the API's condition reasons.
package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func repo(parts ...string) string {
	return filepath.Join(append([]string{"..", ".."}, parts...)...)
}

func read(t *testing.T, parts ...string) string {
	t.Helper()
	b, err := os.ReadFile(repo(parts...))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The README is for users: at most 12 KB, the rest in docs/.
func TestReadmeIsShort(t *testing.T) {
	if n := len(read(t, "README.md")); n > 12_000 {
		t.Errorf("README.md is %d bytes, more than 12 KB (12,000 bytes)", n)
	}
}

// Every reason the API defines (a Reason* constant in api/v1alpha1) has a
// row in docs/reference.md's troubleshooting table, and the table names no
// reason the API lacks.
func TestEveryReasonHasAFix(t *testing.T) {
	reasons := map[string]bool{}
	fset := token.NewFileSet()
	files, err := filepath.Glob(repo("api", "v1alpha1", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Reason") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, _ := strconv.Unquote(lit.Value)
					reasons[v] = true
				}
			}
			return true
		})
	}
	if len(reasons) < 30 {
		t.Fatalf("found %d reasons in api/v1alpha1, expected the whole set", len(reasons))
	}
	doc := read(t, "docs", "reference.md")
	start := strings.Index(doc, "### Troubleshooting")
	if start < 0 {
		t.Fatal("docs/reference.md has no Troubleshooting section")
	}
	section := doc[start:]
	if end := strings.Index(section[3:], "\n### "); end >= 0 {
		section = section[:end+3]
	}
	row := regexp.MustCompile("(?m)^\\| `([A-Za-z]+)` \\|")
	listed := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		listed[m[1]] = true
	}
	for r := range reasons {
		if !listed[r] {
			t.Errorf("reason %s has no row in docs/reference.md's troubleshooting table", r)
		}
	}
	for r := range listed {
		if !reasons[r] {
			t.Errorf("the troubleshooting table lists %s, which api/v1alpha1 does not define", r)
		}
	}
}

// Relative links in the README and docs/ point at files that exist.
func TestRelativeLinksResolve(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)
	// Code spans hold patterns and examples, not links.
	code := regexp.MustCompile("`[^`\n]*`")
	pages, _ := filepath.Glob(repo("docs", "*.md"))
	pages = append(pages, repo("README.md"), repo("charts", "tailcut", "README.md"))
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(code.ReplaceAllString(string(b), ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(page), target)); err != nil {
				t.Errorf("%s links to %s, which does not exist", page, target)
			}
		}
	}
}
