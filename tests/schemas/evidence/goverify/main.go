// A verifier written with others' code: it checks memstream's signed checkpoints and its
// inclusion and consistency proofs with transparency-dev's merkle and formats modules and
// golang.org/x/mod/sumdb/note. Input (stdin, JSON): the log's verifier key and origin, a
// signed checkpoint, inclusion proofs of record bytes, consistency proofs from older
// signed checkpoints. Output: one line per check; exit status 1 on the first failure.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/transparency-dev/formats/log"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"
)

type inclusion struct {
	Index  uint64   `json:"index"`
	Record []byte   `json:"record"`
	Proof  [][]byte `json:"proof"`
}

type consistency struct {
	Old   string   `json:"old_checkpoint"`
	Proof [][]byte `json:"proof"`
}

type input struct {
	VerifierKey string        `json:"verifier_key"`
	Origin      string        `json:"origin"`
	Checkpoint  string        `json:"checkpoint"`
	Inclusions  []inclusion   `json:"inclusions"`
	Consistency []consistency `json:"consistency"`
}

func fail(format string, args ...any) {
	fmt.Printf("FAIL "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fail("input: %v", err)
	}
	verifier, err := note.NewVerifier(in.VerifierKey)
	if err != nil {
		fail("verifier key: %v", err)
	}
	cp, _, _, err := log.ParseCheckpoint([]byte(in.Checkpoint), in.Origin, verifier)
	if err != nil {
		fail("checkpoint: %v", err)
	}
	fmt.Printf("checkpoint ok size=%d\n", cp.Size)
	hasher := rfc6962.DefaultHasher
	for _, inc := range in.Inclusions {
		leaf := hasher.HashLeaf(inc.Record)
		if err := proof.VerifyInclusion(hasher, inc.Index, cp.Size, leaf, inc.Proof, cp.Hash); err != nil {
			fail("inclusion of leaf %d: %v", inc.Index, err)
		}
		fmt.Printf("inclusion ok leaf=%d\n", inc.Index)
	}
	for _, c := range in.Consistency {
		old, _, _, err := log.ParseCheckpoint([]byte(c.Old), in.Origin, verifier)
		if err != nil {
			fail("old checkpoint: %v", err)
		}
		if err := proof.VerifyConsistency(hasher, old.Size, cp.Size, c.Proof, old.Hash, cp.Hash); err != nil {
			fail("consistency %d -> %d: %v", old.Size, cp.Size, err)
		}
		fmt.Printf("consistency ok %d->%d\n", old.Size, cp.Size)
	}
}
