package testkit

import (
	"net"
	"testing"
)

// freePorts returns n distinct free TCP ports on 127.0.0.1.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ls := make([]net.Listener, n)
	ports := make([]int, n)
	for i := range ls {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		ls[i] = l
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}
