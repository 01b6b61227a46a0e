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
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// readyInARow is how many answers in a row, each on a new connection, make a
// target ready: with several proxies behind a Service, one answer may come
// from a proxy that has the route while another does not yet.
const readyInARow = 3

// waitReady sends GETs to every target of the streams, each on a new
// connection, until each has answered below 400 readyInARow times in a row,
// or until timeout. POST targets are left out: a POST must run once.
//
// A load generator keeps its keep-alive connections for the whole run, so a
// connection opened before the path was ready stays wherever it went: a pod
// started with the Service it calls can connect to the ClusterIP before
// kube-proxy has programmed it, and reach whatever answers that address
// outside the cluster. A warm-up did that for its whole run (every answer a
// 404 from an egress proxy, not one request at Envoy).
func waitReady(ctx context.Context, streams []stream, timeout time.Duration, logf func(string, ...any)) error {
	var pending []vegetaTarget
	for _, st := range streams {
		for _, t := range st.targets {
			if t.Method == http.MethodGet {
				pending = append(pending, t)
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	inARow := make([]int, len(pending))
	last := make([]string, len(pending))
	logged := ""
	for {
		ready := true
		for i, t := range pending {
			if inARow[i] >= readyInARow {
				continue
			}
			if err := probe(ctx, t); err != nil {
				inARow[i], last[i] = 0, err.Error()
			} else {
				inARow[i]++
			}
			ready = ready && inARow[i] >= readyInARow
		}
		if ready {
			return nil
		}
		why := notReady(pending, inARow, last)
		if why != logged {
			logf("tailcut verify: waiting for the routes to answer: %s", why)
			logged = why
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the routes did not answer below 400 %d times in a row within %s (--wait-ready): %s", readyInARow, timeout, why)
		case <-time.After(time.Second):
		}
	}
}

// probe sends one GET on a connection of its own.
func probe(ctx context.Context, t vegetaTarget) error {
	req, err := http.NewRequestWithContext(ctx, t.Method, t.URL, nil)
	if err != nil {
		return err
	}
	req.Header = t.Header.Clone()
	if h := t.Header.Get("Host"); h != "" {
		req.Host = h
	}
	client := &http.Client{
		Transport:     &http.Transport{DisableKeepAlives: true, Proxy: http.ProxyFromEnvironment},
		Timeout:       5 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if resp.StatusCode >= 400 {
		// The Server header tells a proxy's own answer (Envoy: "envoy",
		// with no route for the Host) from something else at the address.
		return fmt.Errorf("HTTP %d from server %q", resp.StatusCode, resp.Header.Get("Server"))
	}
	return nil
}

func notReady(targets []vegetaTarget, inARow []int, last []string) string {
	var parts []string
	for i, t := range targets {
		if inARow[i] >= readyInARow || last[i] == "" {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s (Host %s%s): %s", t.URL, t.Header.Get("Host"), bypassNote(t), last[i]))
	}
	return strings.Join(parts, "; ")
}

func bypassNote(t vegetaTarget) string {
	if t.Header.Get(BypassHeader) != "" {
		return ", " + BypassHeader
	}
	return ""
}
