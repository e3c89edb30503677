// Package chaos is the fault suite's harness: a 3-member etcd cluster and ZLink nodes as
// processes of their own on loopback, a TCP proxy on every link between them that a scenario
// can delay, blackhole or cut, a workload that records what every call answered, and the
// checks that read, from journals the runtime does not write, whether any message ran twice,
// got lost, or ran on a stale owner, and whether each object's history was linearizable.
package chaos

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is what a Proxy does with the bytes of its link.
type Mode uint32

const (
	// Pass forwards everything at once.
	Pass Mode = iota
	// Delay forwards everything after the proxy's delay, in both directions.
	Delay
	// Blackhole forwards nothing and answers nothing: connections stay open and bytes vanish,
	// as on a dead route. New connections are accepted and left hanging.
	Blackhole
	// Cut closes every connection and refuses new ones, as a stopped peer or a reset would.
	Cut
	// Deaf stops forwarding toward the target only: the target looks as if it stopped reading,
	// so the sender's buffers fill; the target's own bytes still flow back.
	Deaf
)

// Proxy is a TCP proxy for one link: it listens on a loopback port and forwards to its target.
type Proxy struct {
	name   string
	target string
	lis    net.Listener
	mode   atomic.Uint32
	delay  atomic.Int64 // nanoseconds, for Delay

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
	// changed is closed and replaced when the mode changes: blocked copies look again.
	changed chan struct{}
}

// NewProxy listens on a free loopback port and forwards to target.
func NewProxy(name, target string) (*Proxy, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{name: name, target: target, lis: lis, conns: map[net.Conn]struct{}{}, changed: make(chan struct{})}
	p.wg.Go(p.accept)
	return p, nil
}

// Name is the link's name, for reports.
func (p *Proxy) Name() string { return p.name }

// Addr is the address to dial instead of the target.
func (p *Proxy) Addr() string { return p.lis.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Set switches the proxy to mode; d is the delay of Delay. Cut closes every open connection.
func (p *Proxy) Set(mode Mode, d time.Duration) {
	p.delay.Store(int64(d))
	p.mode.Store(uint32(mode))
	p.mu.Lock()
	close(p.changed)
	p.changed = make(chan struct{})
	var cut []net.Conn
	if mode == Cut {
		for c := range p.conns {
			cut = append(cut, c)
		}
	}
	p.mu.Unlock()
	for _, c := range cut {
		_ = c.Close()
	}
}

// Heal switches the proxy back to Pass.
func (p *Proxy) Heal() { p.Set(Pass, 0) }

func (p *Proxy) current() (Mode, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Mode(p.mode.Load()), p.changed
}

// Close stops the proxy and closes every connection. Safe to call more than once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.changed)
	p.changed = make(chan struct{})
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	err := p.lis.Close()
	for c := range conns {
		_ = c.Close()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *Proxy) accept() {
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		if Mode(p.mode.Load()) == Cut || !p.track(c) {
			_ = c.Close()
			continue
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

// serve forwards one client connection; while blackholed it waits before it even dials.
func (p *Proxy) serve(client net.Conn) {
	defer p.untrack(client)
	for {
		mode, changed := p.current()
		if mode == Cut {
			return
		}
		if mode != Blackhole {
			break
		}
		<-changed
		if p.isClosed() {
			return
		}
	}
	upstream, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	if !p.track(upstream) {
		_ = upstream.Close()
		return
	}
	defer p.untrack(upstream)
	done := make(chan struct{}, 2)
	p.wg.Go(func() { p.pipe(upstream, client, true); done <- struct{}{} })
	p.wg.Go(func() { p.pipe(client, upstream, false); done <- struct{}{} })
	<-done
}

func (p *Proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// pipe copies from src to dst, honouring the mode for each chunk; toTarget says which
// direction it is. It ends both connections when either side ends.
func (p *Proxy) pipe(dst, src net.Conn, toTarget bool) {
	defer func() {
		_ = dst.Close()
		_ = src.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.forward(dst, buf[:n], toTarget) {
			return
		}
		if err != nil {
			return // io.EOF or a closed connection: the link ends
		}
	}
}

// forward writes b to dst once the mode lets it; it reports false when the link is cut.
func (p *Proxy) forward(dst net.Conn, b []byte, toTarget bool) bool {
	for {
		mode, changed := p.current()
		switch {
		case mode == Cut:
			return false
		case mode == Blackhole, mode == Deaf && toTarget:
			<-changed // hold the bytes until the mode changes
			if p.isClosed() {
				return false
			}
			continue
		case mode == Delay:
			time.Sleep(time.Duration(p.delay.Load()))
		}
		_, err := dst.Write(b)
		return err == nil
	}
}
