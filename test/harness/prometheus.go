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
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// StartPrometheus runs a real Prometheus (PROMETHEUS_BIN, which make sets from
// hack/tools.sh; a missing binary fails the test) on a reserved 127.0.0.1
// port, scraping path on each target every second as the job envoy. It is
// stopped by PID when the test ends, and its output is logged when the test
// failed. It returns the server's base URL once it is ready.
func StartPrometheus(tb testing.TB, path string, targets ...string) string {
	tb.Helper()
	bin := Binary(tb, "PROMETHEUS_BIN", "prometheus")
	dir := tb.TempDir()
	quoted := make([]string, len(targets))
	for i, target := range targets {
		quoted[i] = strconv.Quote(target)
	}
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: envoy\n    metrics_path: %q\n    static_configs:\n      - targets: [%s]\n",
		path, strings.Join(quoted, ", "))
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		tb.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(Port(tb)))
	p := RunProcess(tb, "prometheus", dir, nil, bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--storage.tsdb.retention.time=1h", "--web.listen-address="+addr, "--log.level=warn")
	u := "http://" + addr
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if exited, err := p.Exited(); exited {
			tb.Fatalf("prometheus exited early (%v):\n%s", err, p.Tail())
		}
		if resp, err := http.Get(u + "/-/ready"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return u
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("prometheus not ready after 30s:\n%s", p.Tail())
		}
	}
}

// WaitScraped waits until the Prometheus at base has scraped each of its n
// targets once: its first scrapes come up to a scrape interval after it is
// ready, and a reading taken before them holds nothing.
func WaitScraped(tb testing.TB, base string, n int) {
	tb.Helper()
	Eventually(tb, 30*time.Second, fmt.Sprintf("a first scrape of %d targets", n), func() (bool, string) {
		resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(fmt.Sprintf("count(up) >= %d", n)))
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		var body struct {
			Data struct {
				Result []json.RawMessage `json:"result"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			return false, err.Error()
		}
		return len(body.Data.Result) == 1, fmt.Sprintf("%d results", len(body.Data.Result))
	})
}
