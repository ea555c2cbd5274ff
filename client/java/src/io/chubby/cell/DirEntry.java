package io.chubby.cell;

/**
 * One child of a directory, as {@link Handle#readDir()} lists it.
 *
 * @param name the child's name (one path component)
 * @param stat its metadata
 */
public record DirEntry(String name, Stat stat) {}
