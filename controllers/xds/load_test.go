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
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// paced calls send with 0, 1, 2, ... at rate calls a second for length, each
// call in its own goroutine, and returns when every call has.
func paced(rate int, length time.Duration, send func(i int)) {
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for start, i := time.Now(), 0; time.Since(start) < length; i++ {
		<-tick.C
		wg.Go(func() { send(i) })
	}
	wg.Wait()
}

// newLoadClient is a client for paced load: enough idle connections that a
// steady rate does not open a connection per request.
func newLoadClient() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 100}}
}

// getWeb sends GET path to the web.e2e route of the Envoy listening on
// port, with x-test-id id, and reads the whole answer.
func getWeb(client *http.Client, port uint32, path, id string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", port, path), nil)
	if err != nil {
		return nil, err
	}
	req.Host = "web.e2e"
	req.Header.Set("x-test-id", id)
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp, resp.Body.Close()
}
