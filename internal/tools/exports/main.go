// Command exports counts the exported identifiers of each package of the
// module: top-level types, functions, constants and variables, methods on
// exported types, and exported fields of exported struct types. Test files
// and main packages are skipped; what a user can name is what is counted.
//
//	go run ./internal/tools/exports [dir]
//
// It prints one line per package ("path count") and the total; it reads
// source only and never builds anything.
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	counts, err := count(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "exports:", err)
		os.Exit(1)
	}
	paths := make([]string, 0, len(counts))
	for p := range counts {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	total := 0
	for _, p := range paths {
		fmt.Printf("%-24s %d\n", p, counts[p])
		total += counts[p]
	}
	fmt.Printf("%-24s %d\n", "total", total)
}

// count returns the exported identifiers per package directory under root.
func count(root string) (map[string]int, error) {
	counts := map[string]int{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if f.Name.Name == "main" {
			return nil
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		counts[filepath.ToSlash(dir)] += exported(f)
		return nil
	})
	return counts, err
}

// exported counts the exported identifiers one file declares.
func exported(f *ast.File) int {
	n := 0
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil || receiverExported(d.Recv) {
				n++
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					n++
					n += members(s.Type)
				case *ast.ValueSpec:
					for _, name := range s.Names {
						if name.IsExported() {
							n++
						}
					}
				}
			}
		}
	}
	return n
}

// members counts the exported fields of a struct type and the exported
// methods of an interface type.
func members(t ast.Expr) int {
	var list *ast.FieldList
	switch x := t.(type) {
	case *ast.StructType:
		list = x.Fields
	case *ast.InterfaceType:
		list = x.Methods
	default:
		return 0
	}
	n := 0
	for _, field := range list.List {
		for _, name := range field.Names {
			if name.IsExported() {
				n++
			}
		}
	}
	return n
}

func receiverExported(recv *ast.FieldList) bool {
	if len(recv.List) == 0 {
		return false
	}
	t := recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.IsExported()
		default:
			return false
		}
	}
}
