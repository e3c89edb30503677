package gen_test

import (
	"fmt"
	"strings"
)

// unifiedDiff renders a unified diff of two texts by lines, with three lines of context. The
// inputs are small (generated files), so a plain longest-common-subsequence table does.
func unifiedDiff(name, want, got string) string {
	a, b := splitLines(want), splitLines(got)
	// lcs[i][j] is the length of the longest common subsequence of a[i:] and b[j:].
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type line struct {
		op   byte // ' ', '-', '+'
		text string
		ai   int // line number in a (1-based) of this or the next a line
		bi   int
	}
	var lines []line
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			lines = append(lines, line{' ', a[i], i + 1, j + 1})
			i, j = i+1, j+1
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			lines = append(lines, line{'-', a[i], i + 1, j + 1})
			i++
		default:
			lines = append(lines, line{'+', b[j], i + 1, j + 1})
			j++
		}
	}
	const context = 3
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s (want)\n+++ %s (got)\n", name, name)
	for k := 0; k < len(lines); {
		if lines[k].op == ' ' {
			k++
			continue
		}
		// A hunk: from context lines before the change to context lines after the last
		// change that is at most 2*context lines from the previous one.
		start := max(k-context, 0)
		end := k
		for end < len(lines) {
			if lines[end].op != ' ' {
				end++
				continue
			}
			next := end
			for next < len(lines) && lines[next].op == ' ' {
				next++
			}
			if next == len(lines) || next-end > 2*context {
				end = min(end+context, len(lines))
				break
			}
			end = next
		}
		na, nb := 0, 0
		for _, l := range lines[start:end] {
			if l.op != '+' {
				na++
			}
			if l.op != '-' {
				nb++
			}
		}
		fmt.Fprintf(&out, "@@ -%d,%d +%d,%d @@\n", lines[start].ai, na, lines[start].bi, nb)
		for _, l := range lines[start:end] {
			fmt.Fprintf(&out, "%c%s\n", l.op, l.text)
		}
		k = end
	}
	return out.String()
}

func splitLines(s string) []string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
