// gosigned checks memstream's signed records with golang.org/x/mod/sumdb/note (a
// verifier written by others): each record's signature, rebuilt as the signed note it is,
// must open with one of the given verifier keys.
//
// Input (stdin, JSON): {"log_id": "...", "verifier_keys": ["NAME+ID+KEY", ...],
// "records": ["base64 stored bytes", ...]}. Output: one line per record, "record I ok NAME"
// or "record I bad: REASON"; exit status 1 if any record is bad.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"

	"golang.org/x/mod/sumdb/note"
)

type input struct {
	LogID        string   `json:"log_id"`
	VerifierKeys []string `json:"verifier_keys"`
	Records      []string `json:"records"`
}

func check(raw []byte, logID string, verifiers note.Verifiers) (string, error) {
	if len(raw) < 3 || raw[0] != 0xc3 || raw[1] != 0x02 {
		return "", fmt.Errorf("not a signed record")
	}
	n := int(raw[2])
	end := 3 + n
	if len(raw) < end+4+64+1 {
		return "", fmt.Errorf("truncated")
	}
	name := string(raw[3:end])
	sig := raw[end : end+4+64] // key hash || Ed25519 signature
	inner := raw[end+4+64:]
	digest := sha256.Sum256(inner)
	text := "memstream/record/v1\n" + logID + "\n" + base64.StdEncoding.EncodeToString(digest[:]) + "\n"
	var msg bytes.Buffer
	msg.WriteString(text)
	msg.WriteString("\n\u2014 " + name + " " + base64.StdEncoding.EncodeToString(sig) + "\n")
	opened, err := note.Open(msg.Bytes(), verifiers)
	if err != nil {
		return "", err
	}
	if len(opened.Sigs) != 1 {
		return "", fmt.Errorf("%d signatures verified", len(opened.Sigs))
	}
	return opened.Sigs[0].Name, nil
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Println("bad input:", err)
		os.Exit(2)
	}
	var vs []note.Verifier
	for _, key := range in.VerifierKeys {
		v, err := note.NewVerifier(key)
		if err != nil {
			fmt.Println("bad verifier key:", err)
			os.Exit(2)
		}
		vs = append(vs, v)
	}
	verifiers := note.VerifierList(vs...)
	bad := false
	for i, b64 := range in.Records {
		raw, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			fmt.Printf("record %d bad: %v\n", i, err)
			bad = true
			continue
		}
		name, err := check(raw, in.LogID, verifiers)
		if err != nil {
			fmt.Printf("record %d bad: %v\n", i, err)
			bad = true
			continue
		}
		fmt.Printf("record %d ok %s\n", i, name)
	}
	if bad {
		os.Exit(1)
	}
}
