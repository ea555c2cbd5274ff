package io.chubby.cell;

/**
 * A file's content and metadata, read together by {@link Handle#read()}.
 *
 * @param content the content (a copy the caller owns)
 * @param stat the metadata at the time of the read
 */
public record Contents(byte[] content, Stat stat) {
    /**
     * The content decoded as UTF-8.
     *
     * @return the content as a string
     */
    public String text() {
        return new String(content, java.nio.charset.StandardCharsets.UTF_8);
    }
}
