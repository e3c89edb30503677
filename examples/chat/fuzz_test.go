package main

import (
	"strings"
	"testing"
)

// FuzzCommand: any line a person types is either a command with its argument or words said in
// the room; parsing never panics and never loses what was said.
func FuzzCommand(f *testing.F) {
	for _, seed := range []string{
		"/login ann", "/join   lobby  ", "/say hello", "hello there", "/leave", "/rooms", "/quit", "/help",
		"/unknown x", "/", " /login ann", "/login", "\x00", "/join \xff\xfe", "héllo /join x",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, line string) {
		cmd, arg := parseCommand(line)
		if !strings.HasPrefix(cmd, "/") {
			t.Fatalf("%q parsed as command %q", line, cmd)
		}
		if !strings.HasPrefix(line, "/") {
			if cmd != "/say" || arg != line {
				t.Fatalf("%q is said in the room, got %q %q", line, cmd, arg)
			}
			return
		}
		if arg != strings.TrimSpace(arg) || !strings.Contains(line, arg) {
			t.Fatalf("%q: argument %q is not the trimmed rest of the line", line, arg)
		}
	})
}
