package fakemodel

import (
	"bytes"
	"compress/gzip"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type request struct{ seq int }

// start serves routes; the server is passed to handle once it runs.
func start(t *testing.T, handle func(s *Server[request], w http.ResponseWriter, r *http.Request)) *Server[request] {
	t.Helper()
	var s *Server[request]
	s, err := Start[request]("fakemodel-test", t.Logf, func(mux *http.ServeMux) {
		mux.HandleFunc("POST /", func(w http.ResponseWriter, r *http.Request) { handle(s, w, r) })
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// What a Stream writes, ReadEvents reads back, in order and with each
// event's type; a gzipped body is read decompressed.
func TestStream_EventsAndBodiesRoundTrip(t *testing.T) {
	s := start(t, func(s *Server[request], w http.ResponseWriter, r *http.Request) {
		body, err := ReadBody(r, 1<<20)
		if err != nil {
			WriteJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		e := s.StartStream(w, r)
		e.Send("first", map[string]any{"body": string(body)})
		e.Wait(time.Millisecond)
		e.Send("second", map[string]any{"n": 2})
	})
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	zw.Write([]byte("hello"))
	zw.Close()
	req, _ := http.NewRequest(http.MethodPost, s.BaseURL()+"/", &zipped)
	req.Header.Set("Content-Encoding", "gzip")
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("content type %q", ct)
	}
	evs, err := ReadEvents(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Name != "first" || evs[0].Data["body"] != "hello" || evs[1].Name != "second" || evs[1].Data["n"] != 2.0 {
		t.Errorf("events %+v", evs)
	}
}

// Only a main request takes from the script; the rest, and a main
// request past its end, get the default text.
func TestNext_MainRequestsTakeTheScriptInOrder(t *testing.T) {
	s := start(t, func(*Server[request], http.ResponseWriter, *http.Request) {})
	s.Enqueue(Text("a"), Hang().Slow(time.Second))
	if r, scripted := s.Next(false); scripted || r.Whole() != DefaultText {
		t.Errorf("a side request got %+v (scripted %v)", r, scripted)
	}
	if r, scripted := s.Next(true); !scripted || r.Whole() != "a" {
		t.Errorf("the first main request got %+v (scripted %v)", r, scripted)
	}
	if r, scripted := s.Next(true); !scripted || r.Kind != KindHang || r.Delay != time.Second {
		t.Errorf("the second main request got %+v (scripted %v)", r, scripted)
	}
	if r, scripted := s.Next(true); scripted || r.Kind != KindText || s.Pending() != 0 {
		t.Errorf("past the script: %+v (scripted %v)", r, scripted)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s.Record(func(seq int) *request { return &request{seq: seq} })
	if err := s.Wait(ctx, func(rs []request) bool { return len(rs) == 1 && rs[0].seq == 1 }); err != nil {
		t.Error(err)
	}
}

func TestFlatText_StringsAndParts(t *testing.T) {
	for raw, want := range map[string]string{
		`"plain"`: "plain",
		`[{"type":"text","text":"a"},{"type":"text","text":"b"}]`: "ab",
		`{"odd":1}`: `{"odd":1}`,
	} {
		if got := FlatText([]byte(raw)); got != want {
			t.Errorf("FlatText(%s) = %q, want %q", raw, got, want)
		}
	}
	if got := Call("Bash", map[string]string{"command": "ls"}); got.Kind != KindCall || !strings.Contains(got.Args, `"command":"ls"`) {
		t.Errorf("Call = %+v", got)
	}
}
