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

package verify

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// progressEvery is how often a run logs what it has sent so far: a warm-up or
// a long run whose every answer fails says so while it runs, in its Pod's
// log, not only in its table at the end.
const progressEvery = 30 * time.Second

// progress counts each stream's answers as they arrive.
type progress struct {
	mu     sync.Mutex
	order  []string
	counts map[string]*tally
}

type tally struct {
	answered, failed int
	lastErr          string
}

func newProgress(streams []stream) *progress {
	p := &progress{counts: map[string]*tally{}}
	for _, st := range streams {
		p.order = append(p.order, st.name)
		p.counts[st.name] = &tally{}
	}
	return p
}

func (p *progress) add(name string, s sample) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.counts[name]
	t.answered++
	if !s.ok {
		t.failed++
		t.lastErr = s.err
	}
}

// line is, per stream, the answers so far and how many failed, with the last
// failure: "hedged 4500 answered, 0 failed; bypass 4500 answered, 4500 failed
// (last: HTTP 404)".
func (p *progress) line() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	parts := make([]string, 0, len(p.order))
	for _, name := range p.order {
		t := p.counts[name]
		s := fmt.Sprintf("%s %d answered, %d failed", name, t.answered, t.failed)
		if t.failed > 0 {
			s += fmt.Sprintf(" (last: %s)", t.lastErr)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}
