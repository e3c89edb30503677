package rttest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/sdk"
)

// WhoChannel is a ClientServer channel whose servers say which node they run on.
const WhoChannel = "rttest.Who"

// Who methods: Who answers the serving node's ID; Sleep waits for the given milliseconds or
// until its context ends; Note is one-way and reports its message to the server's noted
// callback; Panic panics.
const (
	WhoWho   = "Who"
	WhoSleep = "Sleep"
	WhoNote  = "Note"
	WhoPanic = "Panic"
)

type whoServer struct {
	node  sdk.NodeID
	noted func(string)
}

// WhoDesc describes the Who channel, as zlinkgen would.
var WhoDesc = sdk.ChannelDesc{Name: WhoChannel, Kind: sdk.ChannelClientServer, Methods: []sdk.MethodDesc{
	{
		Name:       WhoWho,
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		NewReply:   func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(impl any, _ context.Context, _ proto.Message) (proto.Message, error) {
			return wrapperspb.String(string(impl.(*whoServer).node)), nil
		},
	},
	{
		Name:       WhoSleep,
		NewRequest: func() proto.Message { return new(wrapperspb.Int64Value) },
		NewReply:   func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(impl any, ctx context.Context, req proto.Message) (proto.Message, error) {
			select {
			case <-time.After(time.Duration(req.(*wrapperspb.Int64Value).GetValue()) * time.Millisecond):
				return wrapperspb.String(string(impl.(*whoServer).node)), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
	},
	{
		Name:       WhoNote,
		OneWay:     true,
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(impl any, _ context.Context, req proto.Message) (proto.Message, error) {
			if s := impl.(*whoServer); s.noted != nil {
				s.noted(req.(*wrapperspb.StringValue).GetValue())
			}
			return nil, nil
		},
	},
	{
		Name:       WhoPanic,
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		NewReply:   func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(any, context.Context, proto.Message) (proto.Message, error) {
			panic("who panics")
		},
	},
}}

// RegisterWhoServer registers node's server of the Who channel; noted, when set, gets every
// Note.
func RegisterWhoServer(r sdk.Registrar, node sdk.NodeID, noted func(string), opts ...sdk.ChannelOption) error {
	return r.RegisterServer(&WhoDesc, &whoServer{node: node, noted: noted}, opts...)
}

// WhoDescNamed is the Who channel under another name, for a test that needs two of them.
func WhoDescNamed(name string) *sdk.ChannelDesc {
	d := WhoDesc
	d.Name = name
	return &d
}

// RegisterWhoServerOf registers node's server of desc, a Who channel under another name.
func RegisterWhoServerOf(r sdk.Registrar, desc *sdk.ChannelDesc, node sdk.NodeID, opts ...sdk.ChannelOption) error {
	return r.RegisterServer(desc, &whoServer{node: node}, opts...)
}

// FeedChannel is a Fanout channel of numbered posts: each is "<publisher>/<seq>", seq counting
// up from 1 per publisher.
const FeedChannel = "rttest.Feed"

// FeedPost is the Feed's one method.
const FeedPost = "Post"

// FeedDesc describes the Feed channel, as zlinkgen would.
var FeedDesc = sdk.ChannelDesc{Name: FeedChannel, Kind: sdk.ChannelFanout, Methods: []sdk.MethodDesc{{
	Name:       FeedPost,
	OneWay:     true,
	NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
	Invoke: func(impl any, _ context.Context, req proto.Message) (proto.Message, error) {
		impl.(*FeedLog).take(req.(*wrapperspb.StringValue).GetValue())
		return nil, nil
	},
}}}

// FeedLog is a Feed subscriber that checks what it gets: every post once, and each
// publisher's posts in order.
type FeedLog struct {
	mu         sync.Mutex
	last       map[string]int
	seen       map[string]struct{}
	total      int
	dups       int
	outOfOrder int
	delay      time.Duration
}

// NewFeedLog returns an empty log; each post it takes waits delay first.
func NewFeedLog(delay time.Duration) *FeedLog {
	return &FeedLog{last: map[string]int{}, seen: map[string]struct{}{}, delay: delay}
}

// SubscribeFeed subscribes l to the Feed channel.
func SubscribeFeed(r sdk.Registrar, l *FeedLog, opts ...sdk.ChannelOption) error {
	return r.Subscribe(&FeedDesc, l, opts...)
}

// FeedPostOf is the post seq of publisher.
func FeedPostOf(publisher sdk.NodeID, seq int) *wrapperspb.StringValue {
	return wrapperspb.String(fmt.Sprintf("%s/%d", publisher, seq))
}

func (l *FeedLog) take(post string) {
	if l.delay > 0 {
		time.Sleep(l.delay)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total++
	if _, dup := l.seen[post]; dup {
		l.dups++
		return
	}
	l.seen[post] = struct{}{}
	i := strings.LastIndexByte(post, '/')
	seq, err := strconv.Atoi(post[i+1:])
	if i < 0 || err != nil {
		l.outOfOrder++
		return
	}
	pub := post[:i]
	if seq <= l.last[pub] {
		l.outOfOrder++
	}
	l.last[pub] = seq
}

// FeedReport is what a FeedLog got.
type FeedReport struct {
	Total, Dups, OutOfOrder int
	// Last is each publisher's highest post.
	Last map[string]int
}

// Report returns what the log got so far.
func (l *FeedLog) Report() FeedReport {
	l.mu.Lock()
	defer l.mu.Unlock()
	last := make(map[string]int, len(l.last))
	for k, v := range l.last {
		last[k] = v
	}
	return FeedReport{Total: l.total, Dups: l.dups, OutOfOrder: l.outOfOrder, Last: last}
}

// String renders the report as "total=N dups=N disorder=N".
func (r FeedReport) String() string {
	return fmt.Sprintf("total=%d dups=%d disorder=%d", r.Total, r.Dups, r.OutOfOrder)
}
