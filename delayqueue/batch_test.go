package delayqueue_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/delayqueue"
)

// TestEnqueueBatch: one call adds every job but those whose chosen ID is in
// the queue, reported in a DuplicateError; the jobs are delivered in due
// order with their payloads; a resend of the call adds nothing more.
func TestEnqueueBatch(t *testing.T) {
	for _, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			ctx := context.Background()
			clk := clock.NewFake(t0)
			q, err := delayqueue.New(bk.make(t, clk)(), "q")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := q.Enqueue(ctx, []byte("old"), delayqueue.ID("taken")); err != nil {
				t.Fatal(err)
			}
			items := []delayqueue.Item{
				{Payload: []byte("p0"), Options: []delayqueue.EnqueueOption{delayqueue.Delay(3 * time.Second)}},
				{Payload: []byte("p1"), Options: []delayqueue.EnqueueOption{delayqueue.ID("taken")}},
				{Payload: []byte("p2"), Options: []delayqueue.EnqueueOption{delayqueue.ID("mine"), delayqueue.At(t0.Add(time.Second))}},
				{Payload: nil, Options: []delayqueue.EnqueueOption{delayqueue.Delay(2 * time.Second)}},
			}
			ids, err := q.EnqueueBatch(ctx, items)
			var dup *delayqueue.DuplicateError
			if !errors.As(err, &dup) || !errors.Is(err, delayqueue.ErrDuplicate) || strings.Join(dup.IDs, ",") != "taken" {
				t.Fatalf("EnqueueBatch: %v, want a DuplicateError for taken", err)
			}
			if len(ids) != 4 || ids[1] != "taken" || ids[2] != "mine" || len(ids[0]) != 32 || len(ids[3]) != 32 || ids[0] == ids[3] {
				t.Fatalf("ids %q", ids)
			}
			if st, err := q.Stats(ctx); err != nil || st != (delayqueue.Stats{Scheduled: 3, Ready: 1}) {
				t.Fatalf("stats %+v %v, want 3 scheduled, 1 ready (taken, due now)", st, err)
			}
			clk.Advance(5 * time.Second)
			res, err := q.Take(ctx, 10, 0, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range res.Deliveries {
				got = append(got, d.ID+"="+string(d.Payload)+"@"+d.DueAt.Sub(t0).String())
			}
			want := []string{"taken=old@0s", "mine=p2@1s", ids[3] + "=@2s", ids[0] + "=p0@3s"}
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("delivered\n %q\nwant\n %q", got, want)
			}
		})
	}
}

// TestEnqueueBatchReplay: the batch's call run twice (a client's resend)
// adds its jobs once and answers the same.
func TestEnqueueBatchReplay(t *testing.T) {
	for _, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			ctx := context.Background()
			q, err := delayqueue.New(bk.make(t, clock.NewFake(t0))(), "q")
			if err != nil {
				t.Fatal(err)
			}
			jobs := []delayqueue.BatchJob{{ID: "drawn", Payload: "a"}, {ID: "chosen", Payload: "b", Chosen: true}}
			for run := range 2 {
				dups, err := q.EnqueueBatchCall(ctx, jobs, "call-b1")
				if err != nil || dups[0] || dups[1] {
					t.Fatalf("run %d: dups %v %v, want none", run+1, dups, err)
				}
			}
			if dups, err := q.EnqueueBatchCall(ctx, jobs, "call-b2"); err != nil || dups[0] || !dups[1] {
				t.Fatalf("another call: dups %v %v, want the chosen ID only", dups, err)
			}
			if st, err := q.Stats(ctx); err != nil || st.Ready != 2 {
				t.Fatalf("stats %+v %v, want 2 ready", st, err)
			}
		})
	}
}

// TestEnqueueBatchBadInput: bad batches are refused whole, with an error
// that names what is wrong.
func TestEnqueueBatchBadInput(t *testing.T) {
	for _, bk := range allBackends()[:2] {
		t.Run(bk.name, func(t *testing.T) {
			ctx := context.Background()
			q, err := delayqueue.New(bk.make(t, nil)(), "q")
			if err != nil {
				t.Fatal(err)
			}
			opts := func(o ...delayqueue.EnqueueOption) []delayqueue.EnqueueOption { return o }
			big := make([]delayqueue.Item, delayqueue.MaxBatch+1)
			for _, c := range []struct {
				items []delayqueue.Item
				want  string
			}{
				{nil, "1 to 1000 items, got 0"},
				{big, "1 to 1000 items, got 1001"},
				{[]delayqueue.Item{{}, {Options: opts(delayqueue.Delay(-time.Second))}}, "item 1: delayqueue: Delay must be"},
				{[]delayqueue.Item{{Options: opts(delayqueue.ID(""))}}, "item 0: delayqueue: ID is empty"},
				{[]delayqueue.Item{{Options: opts(delayqueue.ID("x"))}, {}, {Options: opts(delayqueue.ID("x"))}}, "items 0 and 2 have the same ID \"x\""},
			} {
				if _, err := q.EnqueueBatch(ctx, c.items); err == nil || !strings.Contains(err.Error(), c.want) {
					t.Errorf("EnqueueBatch of %d items: %v, want an error with %q", len(c.items), err, c.want)
				}
			}
			if st, err := q.Stats(ctx); err != nil || st != (delayqueue.Stats{}) {
				t.Fatalf("stats %+v %v, want nothing added", st, err)
			}
			// The largest batch is one call.
			items := make([]delayqueue.Item, delayqueue.MaxBatch)
			for i := range items {
				items[i] = delayqueue.Item{Payload: []byte(strconv.Itoa(i)), Options: opts(delayqueue.ID("id-" + strconv.Itoa(i)))}
			}
			if _, err := q.EnqueueBatch(ctx, items); err != nil {
				t.Fatal(err)
			}
			if st, err := q.Stats(ctx); err != nil || st.Ready != delayqueue.MaxBatch {
				t.Fatalf("stats %+v %v, want %d ready", st, err, delayqueue.MaxBatch)
			}
		})
	}
}
