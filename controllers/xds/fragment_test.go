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

package xds

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tailcut/tailcut/controllers/publish"
	"github.com/tailcut/tailcut/test/harness"
)

// TestPublishOneOfManyTranslatesOne checks the server keeps the translations:
// publishing a new delay for one of 100 policies translates one policy.
func TestPublishOneOfManyTranslatesOne(t *testing.T) {
	ctx := context.Background()
	s := NewServer(ServerOptions{Address: "127.0.0.1:0", Logger: logr.Discard()})
	s.MarkSynced()
	plans := harness.ManyPlans(t, 100)
	for _, p := range plans {
		if err := s.Publish(ctx, publish.Owner{}, p); err != nil {
			t.Fatal(err)
		}
	}
	before := testutil.ToFloat64(translationsTotal)
	p := plans[10]
	p.Hedge.Delay = 44 * time.Millisecond
	if err := s.Publish(ctx, publish.Owner{}, p); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(translationsTotal) - before; got != 1 {
		t.Errorf("one delay change among 100 policies translated %v policies, want 1", got)
	}
}
