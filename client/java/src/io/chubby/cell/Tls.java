package io.chubby.cell;

import chubby.ErrorCode;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.net.InetAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.CertificateException;
import java.security.cert.CertificateFactory;
import java.security.cert.CertificateParsingException;
import java.security.cert.X509Certificate;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Locale;
import java.util.function.Function;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.TrustManager;
import javax.net.ssl.TrustManagerFactory;
import javax.net.ssl.X509ExtendedKeyManager;
import javax.net.ssl.X509ExtendedTrustManager;

/**
 * The mutual TLS of a cell's client port, as the Go client does it: TLS 1.3,
 * the replicas' certificates verified against the cell's CA for server
 * authentication (no host name is checked unless one is required: replicas
 * are reached by address, and what proves a replica is a certificate the
 * cell's CA signed), and this client's certificate, if any, presented to
 * name its principal (without one the cell calls it "anonymous"). Files are
 * PEM: certificates as "CERTIFICATE" blocks, the key as an unencrypted
 * PKCS#8 "PRIVATE KEY" (what {@code openssl req -newkey ec -nodes} and the
 * project's test certificates write; EC, RSA and Ed25519 keys). A
 * traditional "EC PRIVATE KEY" or "RSA PRIVATE KEY" file is refused with
 * the command that converts it ({@code openssl pkcs8 -topk8 -nocrypt}).
 * As in the Go client, the files are followed: checked for changes at most
 * once a second, by the next handshake (a new connection), so a certificate,
 * key or CA renewed on disk is used without a restart; a file that cannot
 * be used (half written, a key that does not match) keeps what was read
 * before until the next check.
 */
public final class Tls {
    private Tls() {}

    /** The environment variable naming the PEM file of the CA that signed the replicas. */
    public static final String ENV_CA = "CHUBBY_TLS_CA";
    /** The environment variable naming this client's certificate (PEM). */
    public static final String ENV_CERT = "CHUBBY_TLS_CERT";
    /** The environment variable naming this client's key (PEM, PKCS#8). */
    public static final String ENV_KEY = "CHUBBY_TLS_KEY";
    /** The environment variable naming the host the replicas' certificates must carry (unset: any). */
    public static final String ENV_SERVER_NAME = "CHUBBY_TLS_SERVER_NAME";

    /** Largest PEM file read. */
    static final long MAX_PEM_BYTES = 1 << 20;

    private static final Pattern PEM = Pattern.compile(
            "-----BEGIN ([A-Z0-9 ]+)-----\\s*([A-Za-z0-9+/=\\s]*?)-----END \\1-----");

    /**
     * The TLS context the Go client builds from the same environment:
     * {@link #ENV_CA}, {@link #ENV_CERT}, {@link #ENV_KEY} and
     * {@link #ENV_SERVER_NAME} (see {@link #fromFiles}).
     *
     * @return the context, or null when CHUBBY_TLS_CA is unset (plaintext)
     * @throws ChubbyException INVALID_ARGUMENT when a file cannot be read or
     *     used, or CHUBBY_TLS_CERT or CHUBBY_TLS_KEY is set without CHUBBY_TLS_CA
     */
    public static SSLContext fromEnv() throws ChubbyException {
        return fromEnv(System::getenv);
    }

    static SSLContext fromEnv(Function<String, String> getenv) throws ChubbyException {
        String ca = nonEmpty(getenv.apply(ENV_CA));
        String cert = nonEmpty(getenv.apply(ENV_CERT));
        String key = nonEmpty(getenv.apply(ENV_KEY));
        if (ca == null) {
            if (cert != null || key != null) {
                throw bad(ENV_CERT + " and " + ENV_KEY + " need " + ENV_CA + " (the CA that signed the replicas)", null);
            }
            return null;
        }
        return fromFiles(Path.of(ca), cert == null ? null : Path.of(cert), key == null ? null : Path.of(key),
                nonEmpty(getenv.apply(ENV_SERVER_NAME)));
    }

    private static String nonEmpty(String s) {
        return s == null || s.isBlank() ? null : s.trim();
    }

    /**
     * A TLS context from PEM files: the CA that signed the replicas'
     * certificates and, optionally, this client's certificate (its chain,
     * leaf first) and key — both or neither (neither: anonymous).
     *
     * @param ca the CA certificates' file
     * @param cert this client's certificate file, or null
     * @param key this client's key file (PKCS#8), or null
     * @param serverName if not null, a host name (or IP address) the
     *     replicas' certificates must carry
     * @return the context, for {@link CellOptions#tls(SSLContext)}
     * @throws ChubbyException INVALID_ARGUMENT when a file cannot be read or
     *     used, or only one of cert and key is given
     */
    public static SSLContext fromFiles(Path ca, Path cert, Path key, String serverName) throws ChubbyException {
        if (ca == null) {
            throw bad("no CA file", null);
        }
        if ((cert == null) != (key == null)) {
            throw bad("a certificate needs its key and a key its certificate (both or neither)", null);
        }
        Source src = new Source(ca, cert, key);
        try {
            SSLContext ctx = SSLContext.getInstance("TLSv1.3");
            X509ExtendedTrustManager trust = new ReloadingTrust(src);
            ctx.init(cert == null ? null : new javax.net.ssl.KeyManager[] {new ReloadingKeys(src)},
                    new TrustManager[] {serverName == null ? trust : new NameCheck(trust, serverName)}, null);
            return ctx;
        } catch (GeneralSecurityException e) {
            throw bad(e.getMessage(), e);
        }
    }

    /** The trust manager of the CA certificates in ca. */
    static X509ExtendedTrustManager trustManager(Path ca) throws ChubbyException {
        try {
            List<X509Certificate> cas = certificates(ca);
            KeyStore trust = KeyStore.getInstance("PKCS12");
            trust.load(null, null);
            for (int i = 0; i < cas.size(); i++) {
                trust.setCertificateEntry("ca-" + i, cas.get(i));
            }
            TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
            tmf.init(trust);
            for (TrustManager t : tmf.getTrustManagers()) {
                if (t instanceof X509ExtendedTrustManager x) {
                    return x;
                }
            }
            throw bad("the JDK has no X.509 trust manager", null);
        } catch (GeneralSecurityException | IOException e) {
            throw bad(ca + ": " + e.getMessage(), e);
        }
    }

    /** The key manager of the certificate chain in cert and its key in key. */
    static X509ExtendedKeyManager keyManager(Path cert, Path key) throws ChubbyException {
        try {
            List<X509Certificate> chain = certificates(cert);
            PrivateKey pk = privateKey(key);
            KeyStore ks = KeyStore.getInstance("PKCS12");
            ks.load(null, null);
            char[] pw = new char[0];
            try {
                ks.setKeyEntry("client", pk, pw, chain.toArray(new X509Certificate[0]));
            } catch (java.security.KeyStoreException e) {
                throw bad("the key in " + key + " does not go with the certificate in " + cert + ": " + e.getMessage(), e);
            }
            if (!matches(chain.get(0), pk)) {
                throw bad("the key in " + key + " does not match the certificate in " + cert, null);
            }
            KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
            kmf.init(ks, pw);
            for (javax.net.ssl.KeyManager k : kmf.getKeyManagers()) {
                if (k instanceof X509ExtendedKeyManager x) {
                    return x;
                }
            }
            throw bad("the JDK has no X.509 key manager", null);
        } catch (GeneralSecurityException | IOException e) {
            throw bad(e.getMessage(), e);
        }
    }

    /** How often the files are checked for changes, at most. */
    static final long CHECK_INTERVAL_NANOS = 1_000_000_000L;

    /** The material of one set of files: trust, keys (null: anonymous), and the files' stamp when read. */
    private record Material(X509ExtendedTrustManager trust, X509ExtendedKeyManager keys, List<Object> stamp) {}

    /**
     * The files of a context and what was last read from them. They are
     * checked for changes (modification time, size, file identity) at most
     * once per CHECK_INTERVAL_NANOS, by the handshake that comes after;
     * changed files are read again, and a read that fails (a half-written
     * file, a key that does not match) keeps the previous material and is
     * tried again at the next check.
     */
    static final class Source {
        private final Path ca, cert, key;
        private volatile Material cur;
        private long nextCheck; // guarded by this

        Source(Path ca, Path cert, Path key) throws ChubbyException {
            this.ca = ca;
            this.cert = cert;
            this.key = key;
            List<Object> st = stamp();
            cur = load(st);
            nextCheck = System.nanoTime() + CHECK_INTERVAL_NANOS;
        }

        private List<Object> stamp() {
            List<Object> st = new ArrayList<>();
            for (Path p : new Path[] {ca, cert, key}) {
                if (p == null) {
                    continue;
                }
                try {
                    java.nio.file.attribute.BasicFileAttributes a =
                            Files.readAttributes(p, java.nio.file.attribute.BasicFileAttributes.class);
                    st.add(List.of(a.lastModifiedTime(), a.size(), String.valueOf(a.fileKey())));
                } catch (IOException e) {
                    st.add("unreadable: " + e.getMessage());
                }
            }
            return st;
        }

        private Material load(List<Object> st) throws ChubbyException {
            return new Material(trustManager(ca), cert == null ? null : keyManager(cert, key), st);
        }

        /** The material now; reload, if a check is due and a file changed, first. */
        Material fresh() {
            synchronized (this) {
                long now = System.nanoTime();
                if (now - nextCheck >= 0) {
                    nextCheck = now + CHECK_INTERVAL_NANOS;
                    List<Object> st = stamp();
                    if (!st.equals(cur.stamp())) {
                        try {
                            cur = load(st);
                        } catch (ChubbyException e) {
                            // keep what we had; the next check tries again
                        }
                    }
                }
            }
            return cur;
        }

        /** The material now, without a check. */
        Material current() {
            return cur;
        }
    }

    /**
     * The key manager of a Source: the alias is chosen from fresh material
     * (the handshake's first question), the chain and key from the same.
     */
    static final class ReloadingKeys extends X509ExtendedKeyManager {
        private final Source src;

        ReloadingKeys(Source src) {
            this.src = src;
        }

        private X509ExtendedKeyManager keys(boolean fresh) {
            return (fresh ? src.fresh() : src.current()).keys();
        }

        @Override
        public String chooseEngineClientAlias(String[] keyType, java.security.Principal[] issuers, SSLEngine engine) {
            return keys(true).chooseEngineClientAlias(keyType, issuers, engine);
        }

        @Override
        public String chooseClientAlias(String[] keyType, java.security.Principal[] issuers, Socket socket) {
            return keys(true).chooseClientAlias(keyType, issuers, socket);
        }

        @Override
        public String[] getClientAliases(String keyType, java.security.Principal[] issuers) {
            return keys(false).getClientAliases(keyType, issuers);
        }

        @Override
        public String[] getServerAliases(String keyType, java.security.Principal[] issuers) {
            return null; // a client: it serves nothing
        }

        @Override
        public String chooseServerAlias(String keyType, java.security.Principal[] issuers, Socket socket) {
            return null;
        }

        @Override
        public X509Certificate[] getCertificateChain(String alias) {
            return keys(false).getCertificateChain(alias);
        }

        @Override
        public PrivateKey getPrivateKey(String alias) {
            return keys(false).getPrivateKey(alias);
        }
    }

    /** The trust manager of a Source: the CA pool current at the handshake. */
    static final class ReloadingTrust extends X509ExtendedTrustManager {
        private final Source src;

        ReloadingTrust(Source src) {
            this.src = src;
        }

        private X509ExtendedTrustManager trust() {
            return src.fresh().trust();
        }

        @Override
        public void checkServerTrusted(X509Certificate[] chain, String authType, Socket socket) throws CertificateException {
            trust().checkServerTrusted(chain, authType, socket);
        }

        @Override
        public void checkServerTrusted(X509Certificate[] chain, String authType, SSLEngine engine) throws CertificateException {
            trust().checkServerTrusted(chain, authType, engine);
        }

        @Override
        public void checkServerTrusted(X509Certificate[] chain, String authType) throws CertificateException {
            trust().checkServerTrusted(chain, authType);
        }

        @Override
        public void checkClientTrusted(X509Certificate[] chain, String authType, Socket socket) throws CertificateException {
            throw new CertificateException("a client of the cell trusts no client");
        }

        @Override
        public void checkClientTrusted(X509Certificate[] chain, String authType, SSLEngine engine) throws CertificateException {
            throw new CertificateException("a client of the cell trusts no client");
        }

        @Override
        public void checkClientTrusted(X509Certificate[] chain, String authType) throws CertificateException {
            throw new CertificateException("a client of the cell trusts no client");
        }

        @Override
        public X509Certificate[] getAcceptedIssuers() {
            return src.current().trust().getAcceptedIssuers();
        }
    }

    /** Whether pk is the private key of cert's public key (a signature made and checked). */
    private static boolean matches(X509Certificate cert, PrivateKey pk) throws GeneralSecurityException {
        String alg = switch (pk.getAlgorithm()) {
            case "EC" -> "SHA256withECDSA";
            case "RSA" -> "SHA256withRSA";
            case "Ed25519", "EdDSA" -> "Ed25519";
            default -> null;
        };
        if (alg == null) {
            return true; // not one we can test: the handshake will tell
        }
        byte[] msg = "chubby key check".getBytes(StandardCharsets.UTF_8);
        java.security.Signature s = java.security.Signature.getInstance(alg);
        s.initSign(pk);
        s.update(msg);
        byte[] sig = s.sign();
        java.security.Signature v = java.security.Signature.getInstance(alg);
        try {
            v.initVerify(cert.getPublicKey());
        } catch (java.security.InvalidKeyException e) {
            return false; // a key of another algorithm
        }
        v.update(msg);
        return v.verify(sig);
    }

    private static String read(Path p) throws ChubbyException {
        try {
            if (Files.size(p) > MAX_PEM_BYTES) {
                throw bad(p + " is over " + MAX_PEM_BYTES + " bytes: not a PEM file of certificates or a key", null);
            }
            return Files.readString(p, StandardCharsets.US_ASCII);
        } catch (IOException e) {
            throw bad("read " + p + ": " + e, e);
        }
    }

    /** The PEM blocks of kind in text, decoded. */
    private static List<byte[]> blocks(String text, String kind, Path from) throws ChubbyException {
        List<byte[]> out = new ArrayList<>();
        Matcher m = PEM.matcher(text);
        while (m.find()) {
            if (m.group(1).equals(kind)) {
                try {
                    out.add(Base64.getMimeDecoder().decode(m.group(2)));
                } catch (IllegalArgumentException e) {
                    throw bad(from + ": a " + kind + " block that is not base64: " + e.getMessage(), e);
                }
            }
        }
        return out;
    }

    static List<X509Certificate> certificates(Path p) throws ChubbyException {
        List<byte[]> ders = blocks(read(p), "CERTIFICATE", p);
        if (ders.isEmpty()) {
            throw bad(p + " holds no PEM CERTIFICATE block", null);
        }
        List<X509Certificate> out = new ArrayList<>();
        try {
            CertificateFactory cf = CertificateFactory.getInstance("X.509");
            for (byte[] der : ders) {
                out.add((X509Certificate) cf.generateCertificate(new ByteArrayInputStream(der)));
            }
        } catch (CertificateException e) {
            throw bad(p + ": " + e.getMessage(), e);
        }
        return out;
    }

    static PrivateKey privateKey(Path p) throws ChubbyException {
        String text = read(p);
        List<byte[]> ders = blocks(text, "PRIVATE KEY", p);
        if (ders.size() != 1) {
            for (String old : new String[] {"EC PRIVATE KEY", "RSA PRIVATE KEY"}) {
                if (!blocks(text, old, p).isEmpty()) {
                    throw bad(p + " holds an \"" + old + "\": convert it to PKCS#8 with "
                            + "openssl pkcs8 -topk8 -nocrypt -in " + p + " -out KEY.pk8", null);
                }
            }
            if (text.contains("ENCRYPTED PRIVATE KEY")) {
                throw bad(p + " holds an encrypted key: the client needs it unencrypted (openssl pkcs8 -topk8 -nocrypt)", null);
            }
            throw bad(p + " holds " + ders.size() + " PEM PRIVATE KEY blocks, want 1", null);
        }
        PKCS8EncodedKeySpec spec = new PKCS8EncodedKeySpec(ders.get(0));
        for (String alg : new String[] {"EC", "RSA", "Ed25519"}) {
            try {
                return KeyFactory.getInstance(alg).generatePrivate(spec);
            } catch (GeneralSecurityException e) {
                // not this algorithm: try the next
            }
        }
        throw bad(p + ": a PKCS#8 key that is not EC, RSA or Ed25519", null);
    }

    private static ChubbyException bad(String why, Throwable cause) {
        return new ChubbyException(ChubbyException.Kind.LOCAL, ErrorCode.INVALID_ARGUMENT, "tls", null, why,
                null, null, cause, false);
    }

    /**
     * A trust manager that also requires name in the server's leaf
     * certificate: a DNS name (exact, or a wildcard's one leftmost label)
     * or, for an IP address, an IP address subject alternative name.
     */
    static final class NameCheck extends X509ExtendedTrustManager {
        private final X509ExtendedTrustManager base;
        private final String name;

        NameCheck(X509ExtendedTrustManager base, String name) {
            this.base = base;
            this.name = name.toLowerCase(Locale.ROOT);
        }

        private void checkName(X509Certificate[] chain) throws CertificateException {
            if (chain == null || chain.length == 0) {
                throw new CertificateException("the server sent no certificate");
            }
            if (!carries(chain[0], name)) {
                throw new CertificateException("server certificate " + chain[0].getSubjectX500Principal().getName()
                        + " is not for " + name);
            }
        }

        static boolean carries(X509Certificate c, String name) throws CertificateParsingException {
            boolean ip = isIP(name);
            java.util.Collection<List<?>> sans = c.getSubjectAlternativeNames();
            if (sans == null) {
                return false;
            }
            for (List<?> san : sans) {
                int type = (Integer) san.get(0);
                String v = String.valueOf(san.get(1)).toLowerCase(Locale.ROOT);
                if (ip && type == 7 && sameIP(v, name)) {
                    return true;
                }
                if (!ip && type == 2 && (v.equals(name)
                        || (v.startsWith("*.") && name.indexOf('.') > 0 && name.substring(name.indexOf('.')).equals(v.substring(1))))) {
                    return true;
                }
            }
            return false;
        }

        private static boolean isIP(String s) {
            return (s.matches("[0-9.]+") && s.chars().filter(ch -> ch == '.').count() == 3) || s.contains(":");
        }

        private static boolean sameIP(String a, String b) {
            try {
                return InetAddress.getByName(a).equals(InetAddress.getByName(b)); // literals: no lookup
            } catch (IOException e) {
                return false;
            }
        }

        @Override
        public void checkServerTrusted(X509Certificate[] chain, String authType, Socket socket) throws CertificateException {
            base.checkServerTrusted(chain, authType, socket);
            checkName(chain);
        }

        @Override
        public void checkServerTrusted(X509Certificate[] chain, String authType, SSLEngine engine) throws CertificateException {
            base.checkServerTrusted(chain, authType, engine);
            checkName(chain);
        }

        @Override
        public void checkServerTrusted(X509Certificate[] chain, String authType) throws CertificateException {
            base.checkServerTrusted(chain, authType);
            checkName(chain);
        }

        @Override
        public void checkClientTrusted(X509Certificate[] chain, String authType, Socket socket) throws CertificateException {
            base.checkClientTrusted(chain, authType, socket);
        }

        @Override
        public void checkClientTrusted(X509Certificate[] chain, String authType, SSLEngine engine) throws CertificateException {
            base.checkClientTrusted(chain, authType, engine);
        }

        @Override
        public void checkClientTrusted(X509Certificate[] chain, String authType) throws CertificateException {
            base.checkClientTrusted(chain, authType);
        }

        @Override
        public X509Certificate[] getAcceptedIssuers() {
            return base.getAcceptedIssuers();
        }
    }
}
