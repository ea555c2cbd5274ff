package io.chubby.cell;

/**
 * The cell's answer to {@link Cell#checkSequencer(Sequencer)}.
 *
 * @param valid whether the sequencer names a lock held now
 * @param reason why not, when not valid ("" otherwise)
 */
public record SequencerCheck(boolean valid, String reason) {}
