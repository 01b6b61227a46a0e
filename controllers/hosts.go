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

package controllers

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"strings"
)

// ReadHostsFile parses a hosts(5) file into name -> IPs. An empty path gives no
// aliases. Malformed lines are errors, so a typo is not silently ignored.
func ReadHostsFile(path string) (map[string][]string, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	aliases := map[string][]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		ip, err := netip.ParseAddr(fields[0])
		if err != nil || len(fields) < 2 {
			return nil, fmt.Errorf("%s:%d: want \"<ip> <name>...\", got %q", path, n, sc.Text())
		}
		for _, name := range fields[1:] {
			aliases[name] = append(aliases[name], ip.String())
		}
	}
	return aliases, sc.Err()
}
