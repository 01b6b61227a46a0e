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
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// tcpStates names the states of /proc/net/tcp's "st" column.
var tcpStates = map[string]string{
	"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1", "05": "FIN_WAIT2",
	"06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING",
}

// PortHolders says which sockets use local port port, with their state and
// the process that holds each (from /proc), for the error of a port that
// turned out not to be free: "LISTEN, pid 1234 (envoy)". It returns "" when
// it finds none or cannot read /proc.
func PortHolders(port int) string {
	owners := socketOwners()
	var found []string
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 {
				continue
			}
			_, hexPort, ok := strings.Cut(fields[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); !ok || err != nil || int(p) != port {
				continue
			}
			state := tcpStates[fields[3]]
			if state == "" {
				state = "state " + fields[3]
			}
			owner := "no process"
			if o, ok := owners[fields[9]]; ok {
				owner = o
			}
			found = append(found, state+", "+owner)
		}
		_ = f.Close()
	}
	return strings.Join(found, "; ")
}

// socketOwners maps socket inodes to "pid N (command)" for every process
// whose descriptors this process may read.
func socketOwners() map[string]string {
	owners := map[string]string{}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		link, err := os.Readlink(fd)
		if err != nil || !strings.HasPrefix(link, "socket:[") {
			continue
		}
		inode := strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")
		pid := strings.Split(fd, "/")[2]
		comm, _ := os.ReadFile("/proc/" + pid + "/comm")
		owners[inode] = fmt.Sprintf("pid %s (%s)", pid, strings.TrimSpace(string(comm)))
	}
	return owners
}
