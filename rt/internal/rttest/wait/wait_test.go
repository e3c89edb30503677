package wait_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/rt/internal/rttest/wait"
)

func TestForReturnsWhatArrives(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	require.Equal(t, 7, wait.For(t, ch))
}

func TestForReturnsTheZeroOfAClosedChannel(t *testing.T) {
	ch := make(chan string)
	close(ch)
	require.Equal(t, "", wait.For(t, ch))
}
