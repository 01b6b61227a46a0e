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

package localstack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/tailcut/tailcut/test/harness"
)

// checkPortFree fails with a clear message when something listens on addr.
func checkPortFree(what, addr string) error {
	if err := harness.PortFree(addr); err != nil {
		return fmt.Errorf("%s port %s is not free (%v); choose another with the stack's port flags", what, addr, err)
	}
	return nil
}

// waitHTTP polls url until it answers 200, the process dies or ctx ends.
func waitHTTP(ctx context.Context, p *harness.Process, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if done, err := p.Exited(); done {
			return fmt.Errorf("%s exited (%v) before %s answered; log %s:\n%s", p.Name, err, url, p.Log, p.Tail())
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("%s did not answer %s within %s; log %s:\n%s", p.Name, url, timeout, p.Log, p.Tail())
			}
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
