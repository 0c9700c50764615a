package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/idempotency"
)

func ExampleStore_Do() {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	mem := backend.NewMemory(backend.WithClock(clk))
	defer mem.Close()
	s, err := idempotency.New(mem, idempotency.TTL(time.Hour))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	charge := func(ctx context.Context) ([]byte, error) {
		fmt.Println("charging the card")
		return []byte("charge ch_1"), nil
	}
	for range 2 {
		res, replayed, err := s.Do(ctx, "order-42", charge)
		fmt.Printf("%s replayed=%v err=%v\n", res, replayed, err)
	}
	clk.Advance(time.Hour) // the stored result expires
	res, replayed, _ := s.Do(ctx, "order-42", charge)
	fmt.Printf("%s replayed=%v\n", res, replayed)
	// Output:
	// charging the card
	// charge ch_1 replayed=false err=<nil>
	// charge ch_1 replayed=true err=<nil>
	// charging the card
	// charge ch_1 replayed=false
}

// Errors are not stored unless StoreErrors says so: a retry runs fn again.
func ExampleStoreErrors() {
	mem := backend.NewMemory()
	defer mem.Close()
	errDeclined := errors.New("card declined")
	s, _ := idempotency.New(mem, idempotency.StoreErrors(func(err error) bool { return errors.Is(err, errDeclined) }))
	ctx := context.Background()
	attempts := []error{errors.New("gateway timeout"), errDeclined, nil}
	for i := range 3 {
		_, replayed, err := s.Do(ctx, "order-7", func(context.Context) ([]byte, error) {
			fmt.Println("attempt", i+1)
			return nil, attempts[i]
		})
		var stored *idempotency.StoredError
		fmt.Printf("err=%v replayed=%v stored=%v\n", err, replayed, errors.As(err, &stored))
	}
	// Output:
	// attempt 1
	// err=gateway timeout replayed=false stored=false
	// attempt 2
	// err=card declined replayed=false stored=false
	// err=card declined replayed=true stored=true
}

func ExampleStore_ConsumeToken() {
	mem := backend.NewMemory()
	defer mem.Close()
	s, _ := idempotency.New(mem, idempotency.TTL(30*time.Minute))
	ctx := context.Background()
	tok, _ := s.IssueToken(ctx) // put it in the form
	for range 2 {               // the form is submitted twice
		ok, err := s.ConsumeToken(ctx, tok)
		fmt.Println("accepted:", ok, err)
	}
	// Output:
	// accepted: true <nil>
	// accepted: false <nil>
}

func ExampleMiddleware() {
	mem := backend.NewMemory()
	defer mem.Close()
	s, _ := idempotency.New(mem)
	created := 0
	h := idempotency.Middleware(s)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		created++
		w.Header().Set("Location", fmt.Sprintf("/payments/%d", created))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "payment %d\n", created)
	}))
	send := func(key, body string) {
		r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(body))
		r.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%d %s replayed=%q %s", w.Code, w.Header().Get("Location"), w.Header().Get(idempotency.ReplayedHeader), w.Body)
	}
	send(`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, `{"amount":100}`)
	send(`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, `{"amount":100}`) // a retry
	send(`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, `{"amount":999}`) // the key reused for another request
	// Output:
	// 201 /payments/1 replayed="" payment 1
	// 201 /payments/1 replayed="true" payment 1
	// 422  replayed="" {"type":"about:blank","title":"Idempotency-Key reused","status":422,"detail":"This Idempotency-Key was used for a different request (method, path or body)."}
}
