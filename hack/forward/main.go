// Command forward relays TCP connections from one address to another until SIGTERM. hack/node.sh
// runs it so that pods on the real node's bridge network reach what listens on the host's
// loopback only (the API server): `forward 10.88.0.1:16443=127.0.0.1:16443 ...`.
// The bridge is the node's own and joins no other network, so nothing leaves the machine.
package main

import (
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: forward LISTEN=TARGET...")
		os.Exit(2)
	}
	for _, route := range os.Args[1:] {
		listen, target, ok := strings.Cut(route, "=")
		if !ok {
			log.Fatalf("%q is not LISTEN=TARGET", route)
		}
		listener, err := net.Listen("tcp", listen)
		if err != nil {
			log.Fatalf("listening on %s: %v", listen, err)
		}
		log.Printf("forwarding %s to %s", listen, target)
		go serve(listener, target)
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	<-signals
}

func serve(listener net.Listener, target string) {
	for {
		conn, err := listener.Accept()
		if err != nil {
			log.Printf("accepting on %s: %v", listener.Addr(), err)
			continue
		}
		go relay(conn, target)
	}
}

// relay copies both ways until either side is done, then closes both.
func relay(conn net.Conn, target string) {
	defer conn.Close()
	upstream, err := net.Dial("tcp", target)
	if err != nil {
		log.Printf("connecting %s to %s: %v", conn.RemoteAddr(), target, err)
		return
	}
	defer upstream.Close()
	var done sync.WaitGroup
	done.Add(2)
	pipe := func(to, from net.Conn) {
		defer done.Done()
		_, _ = io.Copy(to, from)
		// Half-close so the other direction can finish (TLS close_notify, HTTP bodies).
		if tcp, ok := to.(*net.TCPConn); ok {
			_ = tcp.CloseWrite()
		}
	}
	go pipe(upstream, conn)
	go pipe(conn, upstream)
	done.Wait()
}
