package rendezvous

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"testing"
)

func TestPublishedRoundTrip(t *testing.T) {
	tests := []map[string]string{
		{},
		{"a": ""},
		{"card-0": "addr-0", "card-1": "addr-1", "b": "x y=z", "\x00odd": "\xff"},
	}
	big := map[string]string{}
	for i := range 10000 {
		big[fmt.Sprintf("k%05d", i)] = fmt.Sprintf("v%d", i*7)
	}
	tests = append(tests, big)
	for _, kvs := range tests {
		p, err := DecodePublished(EncodePublished(kvs))
		if err != nil {
			t.Fatal(err)
		}
		if p.Len() != len(kvs) {
			t.Errorf("Len %d, want %d", p.Len(), len(kvs))
		}
		for k, v := range kvs {
			if got, ok := p.Get(k); !ok || got != v {
				t.Errorf("Get(%q) = %q, %v; want %q", k, got, ok, v)
			}
		}
		if _, ok := p.Get("missing"); ok {
			t.Errorf("Get(missing) found something")
		}
		if got := maps.Collect(p.All()); !maps.Equal(got, kvs) {
			t.Errorf("All() = %d entries, want %d", len(got), len(kvs))
		}
	}
}

func TestPublishedBad(t *testing.T) {
	entry := func(b []byte, k, v string) []byte {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(v)))
		return append(b, v...)
	}
	ok := entry(entry([]byte{2}, "a", "1"), "b", "2")
	tests := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"count over the bytes", []byte{200}},
		{"one entry short", entry([]byte{2}, "a", "1")},
		{"bytes after", append(bytes.Clone(ok), 0)},
		{"out of order", entry(entry([]byte{2}, "b", "1"), "a", "2")},
		{"duplicate key", entry(entry([]byte{2}, "a", "1"), "a", "2")},
		{"key cut short", []byte{1, 5, 'a'}},
		{"value cut short", []byte{1, 1, 'a', 9, 'x'}},
	}
	if _, err := DecodePublished(ok); err != nil {
		t.Fatalf("the good block: %v", err)
	}
	for _, tt := range tests {
		if _, err := DecodePublished(tt.b); !errors.Is(err, ErrPublished) {
			t.Errorf("%s: err %v, want ErrPublished", tt.name, err)
		}
	}
}

func FuzzDecodePublished(f *testing.F) {
	f.Add(EncodePublished(map[string]string{"a": "1", "b": "2"}))
	f.Add([]byte{1, 1, 'a', 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodePublished(b)
		if err != nil {
			return
		}
		// What decodes holds the same entries once encoded again, and
		// every key is found.
		kvs := maps.Collect(p.All())
		if len(kvs) != p.Len() {
			t.Fatalf("%d distinct keys of %d entries", len(kvs), p.Len())
		}
		q, err := DecodePublished(EncodePublished(kvs))
		if err != nil || !maps.Equal(maps.Collect(q.All()), kvs) {
			t.Fatalf("re-encoded: %v", err)
		}
		for k, v := range kvs {
			if got, ok := p.Get(k); !ok || got != v {
				t.Fatalf("Get(%q) = %q, %v; want %q", k, got, ok, v)
			}
		}
	})
}

// The host's view of the job budget counts each key once, whether it sits
// in the cache, in what fences published, or (put again) in both.
func TestLocalKVHeldAcrossFences(t *testing.T) {
	st, _ := NewStore(1, StoreOptions{})
	l, err := newLocalKV(st.Member(0, 0), []int{0}, map[string]string{"PMI_process_mapping": "(vector,(0,1,1))"})
	if err != nil {
		t.Fatal(err)
	}
	l.setBudgets(Budget{}, Budget{Keys: 4, Bytes: 1 << 20})
	held := func(want int) {
		t.Helper()
		l.mu.Lock()
		keys, _ := l.held()
		l.mu.Unlock()
		if keys != want {
			t.Fatalf("held %d keys, want %d", keys, want)
		}
	}
	fence := func() {
		t.Helper()
		if err := l.barrier(t.Context(), 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, kv := range [][2]string{{"a", "1"}, {"b", "2"}} {
		if err := l.put(0, kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	held(3)
	fence()
	held(3)
	if err := l.put(0, "a", "9"); err != nil { // put again, no larger: never refused
		t.Fatal(err)
	}
	held(3)
	if v, _ := l.get("a"); v != "9" {
		t.Fatalf("a = %q after a put over a published value, want 9", v)
	}
	if err := l.put(0, "c", "3"); err != nil {
		t.Fatal(err)
	}
	held(4)
	var be *BudgetError
	if err := l.put(0, "d", "4"); !errors.As(err, &be) || !be.Job {
		t.Fatalf("a fifth key: %v, want the job budget's refusal", err)
	}
	fence()
	held(4)
	for k, want := range map[string]string{"a": "9", "b": "2", "c": "3"} {
		if v, ok := l.get(k); !ok || v != want {
			t.Errorf("%s = %q, %v; want %q", k, v, ok, want)
		}
	}
}
