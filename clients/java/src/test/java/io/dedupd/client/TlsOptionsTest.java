// SPDX-License-Identifier: Apache-2.0
package io.dedupd.client;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.inprocess.InProcessChannelBuilder;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The Builder's TLS options are checked as dedupctl checks --tls-ca,
 * --tls-cert, --tls-key and --tls-name, and their files are read and parsed
 * by build(). The handshakes themselves are tested against real dedupd
 * nodes (tests/integration/test_clients_java_tls.py).
 *
 * <p>src/test/resources/tls holds a CA (ca.crt; its key was thrown away),
 * a client certificate it signed (client.crt, client.key), the same key in
 * SEC1 form (client-sec1.key) and another key (other.key): P-256, valid for
 * 100 years, made with openssl req/x509 and never used to connect.
 */
class TlsOptionsTest {
    @TempDir
    Path tmp;

    private static Path fixture(String name) {
        try {
            return Path.of(TlsOptionsTest.class.getResource("/tls/" + name).toURI());
        } catch (URISyntaxException e) {
            throw new IllegalStateException(e);
        }
    }

    private static DedupdClient.Builder builder() {
        // Nothing listens on port 1: the client's first map read fails, which is all right here.
        return DedupdClient.newBuilder().seeds("127.0.0.1:1");
    }

    /** build() refuses B with an IllegalArgumentException whose message has every one of WORDS. */
    private static void refused(DedupdClient.Builder b, String... words) {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, b::build);
        for (String w : words) {
            assertTrue(e.getMessage().contains(w), "message lacks \"" + w + "\": " + e.getMessage());
        }
    }

    @Test
    void validOptionsBuild() {
        builder().tlsCa(fixture("ca.crt")).build().close();
        builder().tlsCa(fixture("ca.crt")).tlsClientCert(fixture("client.crt"), fixture("client.key"))
            .tlsServerName("localhost").build().close();
        // A builder may build again: its options are the same.
        DedupdClient.Builder b = builder().tlsCa(fixture("ca.crt"));
        b.build().close();
        b.build().close();
    }

    @Test
    void certificateAndNameNeedTheCa() {
        refused(builder().tlsClientCert(fixture("client.crt"), fixture("client.key")), "need tlsCa");
        refused(builder().tlsServerName("localhost"), "need tlsCa");
    }

    @Test
    void certificateAndKeyGoTogether() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
            () -> builder().tlsClientCert(fixture("client.crt"), null));
        assertTrue(e.getMessage().contains("go together"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> builder().tlsClientCert(null, fixture("client.key")));
        assertTrue(e.getMessage().contains("go together"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> builder().tlsServerName(" "));
        assertThrows(NullPointerException.class, () -> builder().tlsCa(null));
    }

    @Test
    void channelFactoryExcludesTls() {
        refused(builder().tlsCa(fixture("ca.crt")).channelFactory(a -> InProcessChannelBuilder.forName(a).build()),
            "channelFactory", "exclude each other");
        // The other order, and with a client certificate: the same.
        refused(builder().channelFactory(a -> InProcessChannelBuilder.forName(a).build()).tlsCa(fixture("ca.crt"))
            .tlsClientCert(fixture("client.crt"), fixture("client.key")), "exclude each other");
    }

    @Test
    void unreadableFilesAreNamed() throws Exception {
        Path missing = tmp.resolve("missing.crt");
        refused(builder().tlsCa(missing), "tlsCa", missing.toString(), "cannot read");
        refused(builder().tlsCa(tmp), "tlsCa", tmp.toString(), "cannot read"); // a directory
        Path empty = Files.createFile(tmp.resolve("empty.crt"));
        refused(builder().tlsCa(empty), "tlsCa", empty.toString(), "empty");
        refused(builder().tlsCa(fixture("ca.crt")).tlsClientCert(fixture("client.crt"), missing),
            "tlsClientCert key", missing.toString(), "cannot read");
        refused(builder().tlsCa(fixture("ca.crt")).tlsClientCert(missing, fixture("client.key")),
            "tlsClientCert certificate", missing.toString(), "cannot read");
    }

    @Test
    void filesOfTheWrongKindAreRefused() throws Exception {
        Path junk = Files.writeString(tmp.resolve("junk.pem"), "not a certificate\n");
        refused(builder().tlsCa(junk), "tlsCa", junk.toString(), "not usable PEM");
        refused(builder().tlsCa(fixture("client.key")), "tlsCa", "not usable PEM");
        // A certificate where the key should be, and the other way round.
        refused(builder().tlsCa(fixture("ca.crt")).tlsClientCert(fixture("client.crt"), fixture("client.crt")),
            "tlsClientCert", "not usable PEM");
        refused(builder().tlsCa(fixture("ca.crt")).tlsClientCert(fixture("client.key"), fixture("client.key")),
            "tlsClientCert", "not usable PEM");
        // Netty reads PKCS#8 keys only: the error says how to convert.
        refused(builder().tlsCa(fixture("ca.crt")).tlsClientCert(fixture("client.crt"), fixture("client-sec1.key")),
            "client-sec1.key", "PKCS#8", "openssl pkcs8 -topk8");
        // A key that is not the certificate's: refused now, not at the first handshake.
        refused(builder().tlsCa(fixture("ca.crt")).tlsClientCert(fixture("client.crt"), fixture("other.key")),
            "other.key", "is not the key of the certificate");
    }
}
