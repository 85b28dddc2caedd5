// A go checksum database for tests/clients/go.rs, built with Debian's
// golang-golang-x-mod-dev (GOPATH mode): it signs its tree with a key it
// makes at start and knows one module version, hashed from the files it is
// given.
//
// Usage: sumdb MODULE VERSION ZIPFILE GOMODFILE
// Prints "ADDRESS VERIFIER-KEY" on one line, then serves until killed.
package main

import (
	"crypto/rand"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"

	"golang.org/x/mod/sumdb"
	"golang.org/x/mod/sumdb/dirhash"
	"golang.org/x/mod/sumdb/note"
)

func main() {
	if len(os.Args) != 5 {
		log.Fatal("usage: sumdb MODULE VERSION ZIPFILE GOMODFILE")
	}
	module, version, zipFile, modFile := os.Args[1], os.Args[2], os.Args[3], os.Args[4]
	signer, verifier, err := note.GenerateKey(rand.Reader, "mcsum")
	if err != nil {
		log.Fatal(err)
	}
	zipHash, err := dirhash.HashZip(zipFile, dirhash.Hash1)
	if err != nil {
		log.Fatal(err)
	}
	modHash, err := dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) {
		return os.Open(modFile)
	})
	if err != nil {
		log.Fatal(err)
	}
	gosum := func(path, vers string) ([]byte, error) {
		if path != module || vers != version {
			return nil, fmt.Errorf("%s@%s: not in this database", path, vers)
		}
		return []byte(fmt.Sprintf("%s %s %s\n%s %s/go.mod %s\n", path, vers, zipHash, path, vers, modHash)), nil
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s %s\n", listener.Addr(), verifier)
	log.Fatal(http.Serve(listener, sumdb.NewServer(sumdb.NewTestServer(signer, gosum))))
}
