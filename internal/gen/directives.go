package gen

import (
	"fmt"
	"go/ast"
	"go/token"
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/zlink-go/zlink/sdk"
)

// directivePrefix starts every zlinkgen directive. Like //go: directives it has no space
// after the slashes, so go/ast leaves it out of doc comment text.
const directivePrefix = "//zlink:"

// directive is one //zlink: line.
type directive struct {
	comment *ast.Comment
	// name is the word after "zlink:" ("spot", "actor", "server", "fanout", "send").
	name string
	// args are the words after the name, each with its byte offset in the comment.
	args []directiveArg
}

type directiveArg struct {
	text   string
	offset int
}

// parseDirective splits a //zlink: comment into its name and words. ok is false for any
// other comment.
func parseDirective(c *ast.Comment) (d directive, ok bool) {
	if !strings.HasPrefix(c.Text, directivePrefix) {
		return directive{}, false
	}
	d.comment = c
	rest := c.Text[len(directivePrefix):]
	base := len(directivePrefix)
	first := true
	for i := 0; i < len(rest); {
		if isSpace(rest[i]) {
			i++
			continue
		}
		j := i
		for j < len(rest) && !isSpace(rest[j]) {
			j++
		}
		if first {
			d.name = rest[i:j]
			first = false
		} else {
			d.args = append(d.args, directiveArg{text: rest[i:j], offset: base + i})
		}
		i = j
	}
	return d, true
}

// isSpace reports whether b separates a directive's words: ASCII white space only, as a byte
// of a multi-byte UTF-8 character is never one.
func isSpace(b byte) bool {
	return b == ' ' || b == '\t' || b == '\r' || b == '\n' || b == '\v' || b == '\f'
}

// nearDirective matches a comment written like a directive that is not read as one: a space
// after the slashes or before the colon, or a block comment. A space after the colon makes it
// prose ("// zlink: server setup lives in main.go").
var nearDirective = regexp.MustCompile(`^(?://|/\*)\s*zlink\s*:(spot|actor|send|server|fanout)\b`)

// spotDirective is a parsed //zlink:spot or //zlink:actor line.
type spotDirective struct {
	// kind is the Spot kind, or sdk.KindActor for //zlink:actor.
	kind sdk.SpotKind
	// name is the name= option, or "".
	name    string
	namePos token.Position
	// idle is the idle= option, or 0.
	idle    time.Duration
	idlePos token.Position
}

// directiveParser parses directives, reporting problems with positions in fset.
type directiveParser struct {
	fset *token.FileSet
	errs *errorCollector
}

func (p *directiveParser) pos(d directive, offset int) token.Position {
	return p.fset.Position(d.comment.Slash + token.Pos(offset))
}

// spot parses a //zlink:spot or //zlink:actor directive on the interface named where. A Spot
// takes a kind, name= and, for an Instance, idle=; an Actor takes name= only, since it is
// never idle-evicted on its own. ok is false when the directive has problems (they are
// reported).
func (p *directiveParser) spot(d directive, where string) (s spotDirective, ok bool) {
	ok = true
	fail := func(offset int, format string, args ...any) {
		p.errs.add(p.pos(d, offset), where, format, args...)
		ok = false
	}
	actor := d.name == "actor"
	if actor {
		s.kind = sdk.KindActor
	}
	seen := map[string]bool{}
	kindSet := false
	for _, a := range d.args {
		key, val, isOpt := strings.Cut(a.text, "=")
		if !isOpt && actor {
			fail(a.offset, "//zlink:actor takes no kind, got %q: only Spots have kinds", a.text)
			continue
		}
		if !isOpt {
			if kindSet {
				fail(a.offset, "//zlink:spot takes one kind, got another word %q", a.text)
				continue
			}
			kindSet = true
			if strings.EqualFold(a.text, sdk.KindActor.String()) {
				fail(a.offset, "%q is not a Spot kind: declare an Actor type with //zlink:actor", a.text)
				continue
			}
			k, err := sdk.ParseSpotKind(a.text)
			if err != nil || a.text != strings.ToLower(a.text) {
				fail(a.offset, "unknown spot kind %q: want entry, user or instance", a.text)
				continue
			}
			s.kind = k
			continue
		}
		if seen[key] {
			fail(a.offset, "option %s= given twice", key)
			continue
		}
		seen[key] = true
		switch key {
		case "name":
			s.name, s.namePos = val, p.pos(d, a.offset)
			if err := validStableName(val, d.name+" type name", "type"); err != nil {
				fail(a.offset, "invalid name=%q: %v", val, err)
			}
		case "idle":
			if actor {
				fail(a.offset, "//zlink:actor takes no idle=: Actors are never idle-evicted on their own")
				continue
			}
			s.idlePos = p.pos(d, a.offset)
			dur, err := time.ParseDuration(val)
			switch {
			case err != nil:
				fail(a.offset, "invalid idle=%q: not a duration such as 30s or 5m", val)
			case dur <= 0:
				fail(a.offset, "invalid idle=%q: the idle timeout must be positive", val)
			default:
				s.idle = dur
			}
		default:
			if actor {
				fail(a.offset, "unknown option %q of //zlink:actor: want name=", key+"=")
				continue
			}
			fail(a.offset, "unknown option %q of //zlink:spot: want name= or idle=", key+"=")
		}
	}
	if !kindSet && !actor {
		fail(0, "//zlink:spot needs a kind: entry, user or instance")
	}
	if ok && s.idle != 0 && s.kind != sdk.KindInstance {
		p.errs.add(s.idlePos, where, "idle= applies only to instance Spots (D7), this one is %s", strings.ToLower(s.kind.String()))
		ok = false
	}
	return s, ok
}

// channelDirective is a parsed //zlink:server or //zlink:fanout line.
type channelDirective struct {
	// kind is the channel's topology: ClientServer for //zlink:server, Fanout for
	// //zlink:fanout.
	kind sdk.ChannelKind
	// name is the channel= option, or "".
	name string
}

// channelKinds are the topologies of the channel directives.
var channelKinds = map[string]sdk.ChannelKind{"server": sdk.ChannelClientServer, "fanout": sdk.ChannelFanout}

// channel parses a //zlink:server or //zlink:fanout directive on the interface named where. It
// takes channel= only: a channel has no kind and is never idle-evicted. ok is false when the
// directive has problems (they are reported).
func (p *directiveParser) channel(d directive, where string) (c channelDirective, ok bool) {
	ok = true
	fail := func(offset int, format string, args ...any) {
		p.errs.add(p.pos(d, offset), where, format, args...)
		ok = false
	}
	c.kind = channelKinds[d.name]
	seen := map[string]bool{}
	for _, a := range d.args {
		key, val, isOpt := strings.Cut(a.text, "=")
		switch {
		case !isOpt && a.text == "channel":
			fail(a.offset, "option channel has no value: write channel=<name>, or leave it out for <package name>.<Interface>")
			continue
		case !isOpt:
			fail(a.offset, "//zlink:%s takes no kind, got %q: its only option is channel=", d.name, a.text)
			continue
		}
		if seen[key] {
			fail(a.offset, "option %s= given twice", key)
			continue
		}
		seen[key] = true
		switch key {
		case "channel":
			c.name = val
			if err := validStableName(val, "channel name", "channel"); err != nil {
				fail(a.offset, "invalid channel=%q: %v", val, err)
			}
		case "idle":
			fail(a.offset, "//zlink:%s takes no idle=: a channel is not idle-evicted; want channel=", d.name)
		case "name":
			fail(a.offset, "unknown option \"name=\" of //zlink:%s: want channel=, which names a channel", d.name)
		default:
			fail(a.offset, "unknown option %q of //zlink:%s: want channel=", key+"=", d.name)
		}
	}
	return c, ok
}

// send checks a //zlink:send directive, which takes nothing.
func (p *directiveParser) send(d directive, where string) bool {
	if len(d.args) > 0 {
		p.errs.add(p.pos(d, d.args[0].offset), where, "//zlink:send takes no options, got %q", d.args[0].text)
		return false
	}
	return true
}

// known reports whether name is a directive this version understands; it reports the others.
func (p *directiveParser) known(d directive, where string) bool {
	switch d.name {
	case "spot", "actor", "server", "fanout", "send":
		return true
	case "":
		p.errs.add(p.pos(d, 0), where, "empty directive //zlink: (known: %s)", knownDirectives)
	default:
		p.errs.add(p.pos(d, 0), where, "unknown directive //zlink:%s (known: %s)", d.name, knownDirectives)
	}
	return false
}

// knownDirectives lists the directives this version understands, for messages.
const knownDirectives = "//zlink:spot, //zlink:actor, //zlink:server, //zlink:fanout, //zlink:send"

// validStableName checks a stable name: the name= option of a //zlink:spot or //zlink:actor
// directive, or the channel= option of a //zlink:server or //zlink:fanout directive. what names
// it in messages ("spot type name", "channel name"); part is what it is in a full method name
// "/<part>/<method>" ("type", "channel"), where it must fit.
func validStableName(name, what, part string) error {
	if err := sdk.ValidateID(what, name); err != nil {
		return err
	}
	if strings.ContainsAny(name, "/") {
		return fmt.Errorf("it contains '/', which separates %s and method in full method names", part)
	}
	for _, r := range name {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return fmt.Errorf("it contains the character %q", r)
		}
	}
	return nil
}

// directivesOf returns the //zlink: lines of a comment group, in order.
func directivesOf(g *ast.CommentGroup) []directive {
	if g == nil {
		return nil
	}
	var ds []directive
	for _, c := range g.List {
		if d, ok := parseDirective(c); ok {
			ds = append(ds, d)
		}
	}
	return ds
}
