package io.chubby.cell;

import chubby.CompareKind;

/**
 * One condition of a {@link Session#multi(java.util.List, java.util.List)},
 * checked against the cell's state before any of its ops. It needs the read
 * right on its node (for {@link #notExists(String)}: on the nearest existing
 * ancestor). Immutable.
 */
public final class Cmp {
    private final String path;
    private final CompareKind kind;
    private final Long value;

    private Cmp(String path, CompareKind kind, Long value) {
        this.path = path;
        this.kind = kind;
        this.value = value;
    }

    /**
     * Holds if path exists.
     *
     * @param path the node's path
     * @return the condition
     */
    public static Cmp exists(String path) {
        return new Cmp(path, CompareKind.EXISTS, null);
    }

    /**
     * Holds if path does not exist.
     *
     * @param path the node's path
     * @return the condition
     */
    public static Cmp notExists(String path) {
        return new Cmp(path, CompareKind.NOT_EXISTS, null);
    }

    /**
     * Holds if path exists with content generation gen.
     *
     * @param path the node's path
     * @param gen the content generation ({@link Stat#contentGeneration()})
     * @return the condition
     */
    public static Cmp generation(String path, long gen) {
        return new Cmp(path, CompareKind.CONTENT_GENERATION, gen);
    }

    /**
     * Holds if path exists as instance inst (not deleted and re-created
     * since).
     *
     * @param path the node's path
     * @param inst the instance ({@link Stat#instance()})
     * @return the condition
     */
    public static Cmp instance(String path, long inst) {
        return new Cmp(path, CompareKind.INSTANCE, inst);
    }

    /**
     * The node's path.
     *
     * @return the path
     */
    public String path() {
        return path;
    }

    /**
     * What is compared.
     *
     * @return the kind
     */
    public CompareKind kind() {
        return kind;
    }

    chubby.Compare toWire() {
        chubby.Compare c = new chubby.Compare(path, kind);
        if (value != null) {
            c.setValue(value);
        }
        return c;
    }

    @Override
    public String toString() {
        return kind + " " + path + (value == null ? "" : " " + value);
    }
}
