package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// cleaner runs clean-up actions (unmount, stop a daemon, remove a directory) newest first:
// each at the end of the step that needed it, and all that remain when the run ends, fails or
// is interrupted. It is safe for concurrent use, so the signal handler can run it while a
// figure is still in flight.
type cleaner struct {
	// runMu serializes running actions: the signal handler's runAll and the run's own
	// clean-ups must not overlap (a directory must not be removed while a daemon that serves
	// a mount inside it is still stopping).
	runMu   sync.Mutex
	mu      sync.Mutex // guards next and actions
	next    int
	actions map[int]cleanupAction
	log     io.Writer
}

type cleanupAction struct {
	what string
	fn   func() error
}

func newCleaner(log io.Writer) *cleaner {
	return &cleaner{actions: map[int]cleanupAction{}, log: log}
}

// add registers fn and returns a function that runs it now (once) and forgets it. Running an
// action that already ran (or was run by runAll) does nothing and returns nil.
func (c *cleaner) add(what string, fn func() error) func() error {
	c.mu.Lock()
	id := c.next
	c.next++
	c.actions[id] = cleanupAction{what, fn}
	c.mu.Unlock()
	return func() error { return c.run(id) }
}

func (c *cleaner) run(id int) error {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	return c.runLocked(id)
}

func (c *cleaner) runLocked(id int) error {
	c.mu.Lock()
	a, ok := c.actions[id]
	delete(c.actions, id)
	c.mu.Unlock()
	if !ok {
		return nil
	}
	if err := a.fn(); err != nil {
		return fmt.Errorf("clean up (%s): %w", a.what, err)
	}
	return nil
}

// runAll runs every remaining action, newest first, and reports failures to the log: at the
// end nothing more can be done about them than saying so. A concurrent runAll or run waits
// until this one is done.
func (c *cleaner) runAll() {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	for {
		c.mu.Lock()
		id := -1
		for k := range c.actions {
			id = max(id, k)
		}
		c.mu.Unlock()
		if id < 0 {
			return
		}
		if err := c.runLocked(id); err != nil {
			fmt.Fprintf(c.log, "bench: %v\n", err)
		}
	}
}

// handleSignals cancels the run's context on SIGINT or SIGTERM and runs every clean-up, so no
// mount, daemon or temporary file outlives an interrupted run; then it exits with 130. (The
// run's own deferred runAll waits for this one, so the process cannot exit half-way through
// it.) The returned function stops the handler.
func handleSignals(cancel context.CancelFunc, c *cleaner) func() {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	quit := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			fmt.Fprintf(c.log, "\nbench: %v: cleaning up mounts, daemons and temporary files\n", s)
			cancel()
			c.runAll()
			os.Exit(130)
		case <-quit:
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(quit)
	}
}
