# Routing benchmark plots, drawn from the data files run.py writes.
#   gnuplot -c plots.gp MODE TERM OUT DATADIR SCENARIO "NAMES" "TITLE" "MARKS"
# MODE cdf:   TTFT distribution (CDF, log x) per contender, from
#             DATADIR/cdf_SCENARIO_NAME.dat ("ttft_ms fraction").
# MODE share: each replica's share of the requests per 1 s bin over time, one
#             panel per contender, from DATADIR/share_SCENARIO_NAME.dat
#             ("t r1 r2 ..."); MARKS = "T0 T1" draws dashed lines at the fault
#             and at the recovery.
# TERM: svg or png.

mode = ARG1
term = ARG2
out = ARG3
dir = ARG4
sid = ARG5
names = ARG6
title = ARG7
marks = ARG8
n = words(names)

if (mode eq "share") { height = 170 * n + 60 } else { height = 480 }
if (term eq "svg") {
    set terminal svg size 900, height dynamic font "sans,11" background "white"
} else {
    set terminal pngcairo size 900, height font "sans,10" background "white"
}
set output out
set termoption noenhanced
set grid lc rgb "#dddddd"
set border lc rgb "#555555"

if (mode eq "cdf") {
    set title title
    set logscale x 10
    set xlabel "time to first token (ms, log scale)"
    set ylabel "fraction of requests"
    set yrange [0:1.02]
    set key bottom right
    set format x "%g"
    plot for [i=1:n] sprintf("%s/cdf_%s_%s.dat", dir, sid, word(names, i)) \
        using 1:2 with steps lw 2 title word(names, i)
}

if (mode eq "share") {
    set multiplot layout n, 1 title title
    set yrange [0:100]
    set ylabel "share"
    set format y "%.0f%%"
    set key outside right
    do for [i=1:n] {
        f = sprintf("%s/share_%s_%s.dat", dir, sid, word(names, i))
        unset arrow
        if (words(marks) >= 2) {
            set arrow 1 from word(marks, 1)+0, 0 to word(marks, 1)+0, 100 nohead dt 2 lc rgb "#aa0000"
            set arrow 2 from word(marks, 2)+0, 0 to word(marks, 2)+0, 100 nohead dt 2 lc rgb "#008800"
        }
        if (i == n) { set xlabel "time since the load started (s)" } else { unset xlabel }
        set label 1 word(names, i) at graph 0.01, graph 0.9 left front
        plot for [c=2:*] f using 1:(column(c)*100) with linespoints pt 7 ps 0.4 lw 1.5 \
            title columnheader(c)
    }
    unset multiplot
}
