package main

import (
	"bytes"
	"os"
	"testing"
)

// The README's Go program must be this directory's main.go, byte for byte,
// so that the snippet users paste is the one go vet and go build compile.
// Edit main.go and copy it into the README's ```go block (or the reverse).
func TestREADMESnippetIsMainGo(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	var programs [][]byte
	for _, block := range goBlocks(readme) {
		if bytes.HasPrefix(block, []byte("package main\n")) {
			programs = append(programs, block)
		}
	}
	if len(programs) != 1 {
		t.Fatalf("README.md has %d ```go blocks holding a program (package main), want 1", len(programs))
	}
	if got := programs[0]; !bytes.Equal(got, want) {
		t.Errorf("README.md's Go program differs from examples/readme/main.go from line %d:\nREADME:  %q\nmain.go: %q",
			firstDiffLine(got, want), lineAt(got, firstDiffLine(got, want)), lineAt(want, firstDiffLine(got, want)))
	}
}

// goBlocks returns the bodies of the ```go fenced blocks of a Markdown
// file, each ending in a newline.
func goBlocks(md []byte) [][]byte {
	var blocks [][]byte
	var cur []byte
	in := false
	for line := range bytes.Lines(md) {
		trimmed := bytes.TrimRight(line, "\r\n")
		switch {
		case !in && bytes.Equal(trimmed, []byte("```go")):
			in, cur = true, []byte{}
		case in && bytes.Equal(trimmed, []byte("```")):
			in = false
			blocks = append(blocks, cur)
		case in:
			cur = append(cur, line...)
		}
	}
	return blocks
}

// firstDiffLine is the 1-based number of the first line where a and b
// differ.
func firstDiffLine(a, b []byte) int {
	n := 1
	for i := 0; i < len(a) && i < len(b) && a[i] == b[i]; i++ {
		if a[i] == '\n' {
			n++
		}
	}
	return n
}

// lineAt returns line n (1-based) of b, or "" past its end.
func lineAt(b []byte, n int) string {
	for line := range bytes.Lines(b) {
		if n--; n == 0 {
			return string(line)
		}
	}
	return ""
}
