/* A getaddrinfo(3) client, as an application calls it: AF_UNSPEC (A and AAAA), the pod's
 * resolv.conf. Built with musl-gcc, it is musl's resolver that walks the search list.
 * Prints one address a line, or "error: <gai_strerror>" and exits 2. */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

int main(int argc, char **argv) {
    struct addrinfo hints, *res, *p;
    char text[INET6_ADDRSTRLEN];
    int err;
    if (argc != 2) {
        fprintf(stderr, "usage: lookup NAME\n");
        return 64;
    }
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    err = getaddrinfo(argv[1], NULL, &hints, &res);
    if (err != 0) {
        printf("error: %s\n", gai_strerror(err));
        return 2;
    }
    for (p = res; p != NULL; p = p->ai_next) {
        void *addr = p->ai_family == AF_INET ? (void *)&((struct sockaddr_in *)p->ai_addr)->sin_addr
                                             : (void *)&((struct sockaddr_in6 *)p->ai_addr)->sin6_addr;
        printf("%s\n", inet_ntop(p->ai_family, addr, text, sizeof text));
    }
    freeaddrinfo(res);
    return 0;
}
