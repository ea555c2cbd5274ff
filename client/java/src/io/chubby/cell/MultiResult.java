package io.chubby.cell;

import java.util.List;

/**
 * A {@link Session#multi(java.util.List, java.util.List)}'s answer.
 *
 * @param succeeded every compare held and every op was applied
 * @param failedCompare when not succeeded, the index of the first compare
 *     that did not hold (-1 when succeeded)
 * @param stats when succeeded, each op's node after it (a delete's before
 *     it), in the order of the ops; empty otherwise
 */
public record MultiResult(boolean succeeded, int failedCompare, List<Stat> stats) {}
