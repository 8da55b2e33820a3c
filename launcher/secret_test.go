package launcher

import (
	"encoding/hex"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
)

// Attack 1b of the security review, guessing the job's secret: it is 24
// bytes (48 hex digits) from crypto/rand, new for every job.
func TestJobSecret(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		s := newSecret()
		if b, err := hex.DecodeString(s); err != nil || len(b) != 24 {
			t.Fatalf("newSecret() = %q: want 24 bytes in hex", s)
		}
		if seen[s] {
			t.Fatalf("newSecret() gave %q twice", s)
		}
		seen[s] = true
	}
	// Random and unpredictable are not the same: math/rand would pass the
	// above. newSecret's rand must be crypto/rand.
	f, err := parser.ParseFile(token.NewFileSet(), "head.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	imports := map[string]string{} // name in the file -> path
	for _, im := range f.Imports {
		path, _ := strconv.Unquote(im.Path.Value)
		elems := strings.Split(path, "/")
		name := elems[len(elems)-1]
		if len(elems) > 1 && len(name) > 1 && name[0] == 'v' && strings.Trim(name[1:], "0123456789") == "" {
			name = elems[len(elems)-2] // math/rand/v2 is rand
		}
		if im.Name != nil {
			name = im.Name.Name
		}
		imports[name] = path
	}
	reads := 0
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Name.Name != "newSecret" {
			continue
		}
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Read" {
				if pkg, ok := sel.X.(*ast.Ident); ok {
					reads++
					if imports[pkg.Name] != "crypto/rand" {
						t.Errorf("newSecret reads from %s.Read (%q), want crypto/rand", pkg.Name, imports[pkg.Name])
					}
				}
			}
			return true
		})
	}
	if reads == 0 {
		t.Error("newSecret in head.go reads no random bytes")
	}
}
