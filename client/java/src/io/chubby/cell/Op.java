package io.chubby.cell;

import chubby.MultiOpKind;
import java.nio.ByteBuffer;

/**
 * One change of a {@link Session#multi(java.util.List, java.util.List)}. Each
 * has the rights, events and cache invalidations of the single call it
 * stands for: a create those of {@link Session#createFile(String, byte[], boolean)}
 * or {@link Session#mkdir(String, boolean)}, a set those of
 * {@link Handle#write(byte[], Long)}, a delete those of
 * {@link Handle#delete(boolean)}. Immutable (contents are copied).
 */
public final class Op {
    private final MultiOpKind kind;
    private final String path;
    private final byte[] content;
    private final boolean directory, ephemeral, recursive;
    private final Long expectedGeneration;

    private Op(MultiOpKind kind, String path, byte[] content, boolean directory, boolean ephemeral,
            boolean recursive, Long expectedGeneration) {
        this.kind = kind;
        this.path = path;
        this.content = content;
        this.directory = directory;
        this.ephemeral = ephemeral;
        this.recursive = recursive;
        this.expectedGeneration = expectedGeneration;
    }

    private static byte[] copy(byte[] b) {
        return b == null ? new byte[0] : b.clone();
    }

    /**
     * Creates a file with content; EXISTS if the node is present.
     *
     * @param path the file's path
     * @param content its content (copied; null for empty)
     * @return the op
     */
    public static Op create(String path, byte[] content) {
        return new Op(MultiOpKind.CREATE, path, copy(content), false, false, false, null);
    }

    /**
     * Creates a file owned by the session: deleted when it ends.
     *
     * @param path the file's path
     * @param content its content (copied; null for empty)
     * @return the op
     */
    public static Op createEphemeral(String path, byte[] content) {
        return new Op(MultiOpKind.CREATE, path, copy(content), false, true, false, null);
    }

    /**
     * Creates a directory (its parent must exist).
     *
     * @param path the directory's path
     * @return the op
     */
    public static Op mkdir(String path) {
        return new Op(MultiOpKind.CREATE, path, null, true, false, false, null);
    }

    /**
     * Replaces a file's content.
     *
     * @param path the file's path
     * @param content the new content (copied; null for empty)
     * @return the op
     */
    public static Op set(String path, byte[] content) {
        return new Op(MultiOpKind.SET_CONTENTS, path, copy(content), false, false, false, null);
    }

    /**
     * Replaces a file's content if its content generation is gen
     * (GENERATION_MISMATCH refuses the whole multi otherwise).
     *
     * @param path the file's path
     * @param content the new content (copied; null for empty)
     * @param gen the content generation the file must have
     * @return the op
     */
    public static Op setIf(String path, byte[] content, long gen) {
        return new Op(MultiOpKind.SET_CONTENTS, path, copy(content), false, false, false, gen);
    }

    /**
     * Deletes a node (a non-empty directory only when recursive).
     *
     * @param path the node's path
     * @param recursive delete a directory's children too
     * @return the op
     */
    public static Op delete(String path, boolean recursive) {
        return new Op(MultiOpKind.DELETE, path, null, false, false, recursive, null);
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
     * What the op does.
     *
     * @return the kind
     */
    public MultiOpKind kind() {
        return kind;
    }

    int contentBytes() {
        return content == null ? 0 : content.length;
    }

    chubby.MultiOp toWire() {
        chubby.MultiOp o = new chubby.MultiOp(kind, path);
        if (content != null) {
            o.setContent(ByteBuffer.wrap(content));
        }
        if (directory) {
            o.setDirectory(true);
        }
        if (ephemeral) {
            o.setEphemeral(true);
        }
        if (recursive) {
            o.setRecursive(true);
        }
        if (expectedGeneration != null) {
            o.setExpected_generation(expectedGeneration);
        }
        return o;
    }

    @Override
    public String toString() {
        return kind + " " + path;
    }
}
