/** Linux interface names: at most 15 bytes, no '/', whitespace or glob characters (lldpd -I takes patterns). */
export const IFNAME = /^[A-Za-z0-9_.:@-]{1,15}$/;
