// SPDX-License-Identifier: Apache-2.0
package io.dedupd.client;

/**
 * A call refused before it was sent: the client already holds its bound of
 * calls (in flight plus queued; DedupdClient.Builder.maxInFlight and
 * maxQueued). With Backpressure.FAIL_FAST it is thrown into the future at
 * once; with Backpressure.BLOCK after the caller waited blockTimeout.
 * Nothing reached the server: the caller may retry later or shed the call.
 */
public final class BackpressureException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public BackpressureException(String message) {
        super(message);
    }
}
