/*
 * statuspage.h: the live status page the admin listener serves at "/": plain
 * HTML and a little JavaScript that polls /admin/backends every second and
 * shows each backend's health, load, engine queue, TTFT and share of traffic;
 * below, the last minutes of each backend and of the fleet as small inline SVG
 * plots drawn from /admin/history (ops/history.c), fetched with ?since= so each
 * refresh brings only the new points.
 */
#ifndef LG_STATUSPAGE_H
#define LG_STATUSPAGE_H

/* The whole page, NUL-terminated (static). */
extern const char lg_status_page[];

#endif /* LG_STATUSPAGE_H */
